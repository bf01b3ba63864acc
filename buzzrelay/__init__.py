"""The Buzz relay Django project: settings, URL and ASGI routing, and the buzz-admin entry."""

VERSION = "0.1.0"
