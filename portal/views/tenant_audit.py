"""The tenant audit sink: where a tenant API server's audit webhook posts its EventLists."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from kiln.errors import KilnError, error_body
from portal.services.tenant_audit import tenant_audit_ingest


# The tenant API server posts without a session or CSRF token; the per-environment bearer
# token in its webhook kubeconfig authenticates it.
@csrf_exempt
@require_POST
def tenant_audit_sink(request: HttpRequest, public_id: str) -> JsonResponse:
    """POST /hooks/tenant-audit/<environment>/: an audit.k8s.io/v1 EventList in, counts out."""
    auth = request.headers.get("Authorization", "")
    token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else ""
    try:
        result = tenant_audit_ingest(environment_id=public_id, token=token, body=request.body)
    except KilnError as exc:
        return JsonResponse(error_body(exc.code, exc.message, exc.extra), status=exc.http_status)
    return JsonResponse(result)
