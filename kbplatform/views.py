"""Error pages outside DRF: JSON for `/api/` paths (same shape as the API), Django's defaults elsewhere."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"message": "The request is not valid.", "extra": {}}, status=400)
    return defaults.bad_request(request, exception)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"message": "Not found.", "extra": {"path": request.path}}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"message": "Internal error; it has been logged.", "extra": {}}, status=500)
    return defaults.server_error(request)
