"""Kiln's URL map: pages, /api/v1/, schema and docs, health, readiness and metrics.

The apps' routes are mounted from the modules named in `settings.KILN_APP_URLCONFS`
(strings, as ROOT_URLCONF and INSTALLED_APPS are), so the project package imports
no app: each module has `app_name`, `urlpatterns` (pages) and `api_urlpatterns`
(under /api/v1/).
"""

from importlib import import_module

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView

import kiln.api_urls
from kiln import doc_pages, views
from kiln.attention import views as attention_views

handler400 = "kiln.views.bad_request"
handler403 = "kiln.views.permission_denied"
handler404 = "kiln.views.not_found"
handler500 = "kiln.views.server_error"

APPS = tuple(import_module(name) for name in settings.KILN_APP_URLCONFS)

api_v1 = [
    path("", views.ApiRootView.as_view(), name="api-root"),
    path("", include((kiln.api_urls.api_urlpatterns, "kiln-api"))),
]
for module in APPS:
    if module.api_urlpatterns:
        api_v1.append(path("", include((module.api_urlpatterns, f"{module.app_name}-api"))))

urlpatterns = [
    path("", views.home, name="home"),
    path("search/", views.search_page, name="search"),
    path("docs/<str:name>/", doc_pages.doc_page, name="doc"),
    path("attention/", attention_views.attention_card, name="attention"),
    path("attention/feed.json", attention_views.attention_feed, name="attention-feed"),
    path("attention/dismiss/", attention_views.attention_dismiss_view, name="attention-dismiss"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    path("favicon.ico", RedirectView.as_view(url="/static/kiln/favicon.svg", permanent=True)),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", views.ApiDocsView.as_view(url_name="schema"), name="api-docs"),
]
for module in APPS:
    if module.urlpatterns:
        urlpatterns.append(path("", include((module.urlpatterns, module.app_name))))
