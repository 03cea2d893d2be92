"""URL routes: the admin and the REST API."""

from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from palace.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", api.urls),
]
if settings.PALAZZO.oauth_enabled:
    # The login and consent pages and the authorization server (palace.routes.oauth).
    urlpatterns.insert(0, path("", include("palace.routes.oauth")))
