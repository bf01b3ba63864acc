"""The relay's HTTP edge on Django REST framework: one pipeline for `/query`, `/event` and NIP-11.

PROTOCOL.md section 3 in the order it gives, written once in `views.RelayAPIView`:

1. body size (413): `relaycore.body_limit` in front of everything, and the parser again;
2. community from the host (404): `communities.community_for_host`;
3. the per-client-address limit, before any signature is verified: `AddressRateThrottle`;
4. NIP-98 (401, `WWW-Authenticate: Nostr`): `Nip98Authentication`, the replay claim inside;
5. the request's shape (400): the view's `parse`;
6. the per-pubkey limit (429 `Retry-After`): `PubkeyRateThrottle`;
7. the work, whose budgets answer 503: the view's `serve`.

Every refusal is an exception that `exceptions.relay_exception_handler` renders as
`{"error", "message"}`. The views run on the event loop: `front_door.FrontDoor` serves them in
front of Django's handler (whose synchronous middleware would cost a thread hop per hook), and
Django's URL configuration routes to the same views, so both doors lead to one pipeline.
"""
