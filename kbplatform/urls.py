from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from kbplatform.apis import HealthApi

api_v1 = [
    path("", include("tenants.urls")),
    path("", include("retrieval.urls")),
    path("", include("conversations.urls")),
    path("", include("lifecycle.urls")),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/health/", HealthApi.as_view(), name="health"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include(api_v1)),
]

handler400 = "kbplatform.views.bad_request"
handler404 = "kbplatform.views.not_found"
handler500 = "kbplatform.views.server_error"
