"""A minimal Django project the Django / django-qstash tests mount into the fake."""
