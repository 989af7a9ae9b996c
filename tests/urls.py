"""URLs of the test project: the Django admin, which mounts the EchoMQ dashboard."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
