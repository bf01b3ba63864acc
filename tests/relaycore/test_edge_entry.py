"""`RelayAPIView.as_view()`: the one entry point of a relay view, a coroutine function awaiting
`respond`, with what Django and DRF read of a view function (the class, the CSRF exemption);
DRF's synchronous `dispatch`, which would skip the relay's order, refuses to run."""

from __future__ import annotations

import inspect

import pytest
from django.test import RequestFactory
from django.urls import resolve

from artifacts.api.views import QueryView
from relayinfo.views import RelayInfoView


def test_as_view_is_a_coroutine_function_carrying_the_view_class_and_csrf_exemption() -> None:
    view = QueryView.as_view()
    assert inspect.iscoroutinefunction(view)
    assert view.view_class is QueryView  # type: ignore[attr-defined]
    assert view.cls is QueryView  # type: ignore[attr-defined]  # DRF's, read by the schema
    assert view.csrf_exempt is True  # type: ignore[attr-defined]
    assert not hasattr(view, "__wrapped__")
    # What the URL configuration routes to is that function, initkwargs included.
    info = resolve("/info").func
    assert info.view_class is RelayInfoView  # type: ignore[attr-defined]
    assert info.initkwargs == {"document_only": True}  # type: ignore[attr-defined]


def test_drf_dispatch_refuses_to_run() -> None:
    request = RequestFactory().post("/query")
    with pytest.raises(TypeError, match="respond"):
        QueryView().dispatch(request)
