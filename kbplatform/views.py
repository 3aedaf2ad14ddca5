"""Error pages outside DRF: JSON for `/api/` paths (same shape as the API), Django's defaults elsewhere."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import is_valid_path
from django.views import defaults


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"message": "The request is not valid.", "extra": {}}, status=400)
    return defaults.bad_request(request, exception)


def api_not_found(request: HttpRequest) -> JsonResponse:
    """The API's 404 for a path no endpoint answers; when the path only lacks its trailing slash (a write is not
    redirected to it, see `kbplatform.middleware.ApiCommonMiddleware`), the message gives the path to use."""
    message = "Not found."
    if not request.path.endswith("/") and is_valid_path(f"{request.path_info}/", getattr(request, "urlconf", None)):
        message = f"Not found. The API's paths end with a slash: send {request.method} {request.path}/ instead."
    return JsonResponse({"message": message, "extra": {"path": request.path}}, status=404)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return api_not_found(request)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"message": "Internal error; it has been logged.", "extra": {}}, status=500)
    return defaults.server_error(request)
