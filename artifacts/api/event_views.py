"""Placeholder until the endpoint lands: answers 501 JSON (replaced by its issue's work)."""

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from buzzrelay.http import json_error


@csrf_exempt
def post_event(request: HttpRequest) -> HttpResponse:
    return json_error(501, "not_implemented", "this endpoint is not served yet")
