"""URL routes: the admin and the REST API."""

from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from palace.api import api

urlpatterns = [
    # Nothing lives at the root: a person who opens the server's address lands on the admin's login.
    path("", RedirectView.as_view(pattern_name="admin:index"), name="root"),
    path("admin/", admin.site.urls),
    path("", api.urls),
]
if settings.PALAZZO.oauth_enabled:
    # The login and consent pages and the authorization server (palace.routes.oauth).
    urlpatterns.insert(0, path("", include("palace.routes.oauth")))
