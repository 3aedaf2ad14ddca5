import os

from django.core.asgi import get_asgi_application

from kbplatform.middleware import AsgiBytesCodecCharsetRefusal

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
application = AsgiBytesCodecCharsetRefusal(get_asgi_application())
