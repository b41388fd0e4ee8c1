"""The dashboard's web app (Starlette): server-rendered pages, the JSON they poll, and the static files.

Read-only: no route writes the registry or a plan. Every template is autoescaped, so run names, events
and plan text reach the page as text. With a token, every request must carry it (query `token`, once,
which sets a cookie; the cookie; or `Authorization: Bearer`).
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from cheaptune.runs.compare import compare_rows
from cheaptune.ui import plans as plan_files
from cheaptune.ui import views
from cheaptune.ui.store import RegistryUnavailable, RunStore

HERE = Path(__file__).parent
COOKIE = "cheaptune_ui_token"
HEADERS = {"Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:",
           "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


def plotly_js() -> Path | None:
    """plotly.min.js as the plotly package ships it (served locally: the pages work offline)."""
    try:
        import plotly
    except ImportError:
        return None
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    return path if path.is_file() else None


class TokenCheck(BaseHTTPMiddleware):
    """Refuses (403) any request without the token; a `?token=` visit also sets it as a cookie."""

    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next: Any) -> Response:
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        given = request.query_params.get("token")
        if not any(hmac.compare_digest(t.encode(), self.token.encode())
                   for t in (given, request.cookies.get(COOKIE), bearer) if t):
            return PlainTextResponse("403: this dashboard needs its token (open the URL `cheaptune ui` printed)",
                                     status_code=403)
        response = await call_next(request)
        if given:
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
        return response


def create_app(registry: str | Path, plan_paths: list[Path], token: str | None = None) -> Starlette:
    """The app over the registry file at `registry` and the plan files found in `plan_paths`."""
    store = RunStore(registry)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    templates = Jinja2Templates(env=env)

    def page(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        return templates.TemplateResponse(request, name, context, status_code=status, headers=HEADERS)

    def runs_or_message() -> tuple[list[dict], str | None]:
        try:
            return store.list_runs(), None
        except RegistryUnavailable as err:
            return [], str(err)

    def one_run(run_id: str) -> dict:
        try:
            run = store.get_run(run_id)
        except RegistryUnavailable as err:
            raise HTTPException(503, str(err)) from None
        if run is None:
            raise HTTPException(404, f"no run {run_id!r} in {store.path}")
        return run

    def plan_ref(plan_id: str) -> plan_files.PlanRef:
        ref = next((r for r in plan_files.find_plans(plan_paths) if r.id == plan_id), None)
        if ref is None:
            raise HTTPException(404, f"no plan file with id {plan_id!r}")
        return ref

    def runs_data(request: Request) -> dict[str, Any]:
        runs, message = runs_or_message()
        filters = {k: request.query_params.get(k, "") for k in views.FILTERS}
        rows = [views.run_row(r) for r in runs if views.matches(r, filters)]
        return {"rows": rows, "message": message, "filters": filters, "choices": views.choices(runs),
                "headers": views.RUN_HEADERS}

    def runs_html(request: Request) -> Response:
        return page(request, "runs.jinja", **runs_data(request))

    def runs_json(request: Request) -> Response:
        data = runs_data(request)
        return JSONResponse(data, status_code=503 if data["message"] else 200)

    def run_html(request: Request) -> Response:
        return page(request, "run.jinja", run=views.run_page(one_run(request.path_params["run_id"])))

    def run_json(request: Request) -> Response:
        return JSONResponse(views.run_page(one_run(request.path_params["run_id"])))

    def compare_data(request: Request) -> list[dict]:
        ids = request.query_params.getlist("ids")
        return compare_rows([one_run(i) for i in dict.fromkeys(ids)])

    def compare_html(request: Request) -> Response:
        return page(request, "compare.jinja", rows=compare_data(request))

    def compare_json(request: Request) -> Response:
        return JSONResponse({"runs": compare_data(request)})

    def plans_html(request: Request) -> Response:
        return page(request, "plans.jinja", plans=plan_files.find_plans(plan_paths), where=plan_paths)

    def plans_json(request: Request) -> Response:
        return JSONResponse([{"id": r.id, "path": str(r.path)} for r in plan_files.find_plans(plan_paths)])

    def plan_html(request: Request) -> Response:
        return page(request, "plan.jinja", plan=plan_files.plan_page(plan_ref(request.path_params["plan_id"])))

    def plan_json(request: Request) -> Response:
        return JSONResponse(plan_files.plan_page(plan_ref(request.path_params["plan_id"])))

    def plotly(request: Request) -> Response:
        path = plotly_js()
        if path is None:
            raise HTTPException(404, "plotly is not installed: pip install 'cheaptune[ui]' for the charts")
        return FileResponse(path, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})

    async def not_found(request: Request, exc: HTTPException) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
        return page(request, "error.jinja", status=exc.status_code, message=exc.detail)

    routes = [
        Route("/", lambda request: RedirectResponse("/runs")),
        Route("/runs", runs_html), Route("/api/runs", runs_json),
        Route("/runs/{run_id}", run_html), Route("/api/runs/{run_id}", run_json),
        Route("/compare", compare_html), Route("/api/compare", compare_json),
        Route("/plans", plans_html), Route("/api/plans", plans_json),
        Route("/plans/{plan_id}", plan_html), Route("/api/plans/{plan_id}", plan_json),
        Route("/static/plotly.min.js", plotly),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [Middleware(TokenCheck, token=token)] if token else []
    return Starlette(routes=routes, middleware=middleware, exception_handlers={HTTPException: not_found})
