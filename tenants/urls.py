from django.urls import path

from tenants.apis import WhoAmIApi

urlpatterns = [
    path("whoami/", WhoAmIApi.as_view(), name="whoami"),
]
