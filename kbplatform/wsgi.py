import os

from django.core.wsgi import get_wsgi_application

from kbplatform.middleware import BytesCodecCharsetRefusal

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
application = BytesCodecCharsetRefusal(get_wsgi_application())
