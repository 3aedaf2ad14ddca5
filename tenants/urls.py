from django.urls import path

from tenants.apis import ApiKeyCollectionApi, ApiKeyDetailApi, ApiKeyRevokeApi, WhoAmIApi

urlpatterns = [
    path("whoami/", WhoAmIApi.as_view(), name="whoami"),
    path("api-keys/", ApiKeyCollectionApi.as_view(), name="api-key-list"),
    path("api-keys/<int:api_key_id>/", ApiKeyDetailApi.as_view(), name="api-key-detail"),
    path("api-keys/<int:api_key_id>/revoke/", ApiKeyRevokeApi.as_view(), name="api-key-revoke"),
]
