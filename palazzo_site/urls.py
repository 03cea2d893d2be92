"""URL routes: the admin and the REST API."""

from django.contrib import admin
from django.urls import path

from palace.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", api.urls),
]
