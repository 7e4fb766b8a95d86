"""Stored fleet reports, for the MCP ``get_fleet_report`` tool and ``GET /api/fleet``.

A fleet report is a folder the ``fleet`` command wrote (it holds ``report.json``). The server looks
in each ``--fleet-dir`` folder (the folder itself and its direct subfolders) and in
``DATA_DIR/fleet/*``; a report's name is its folder's name. Read only; nothing here runs analyses.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from diagnosers.fleet import FleetReport
from server.core.errors import ApiError, not_found
from server.core.settings import Settings

REPORT_FILE = "report.json"


class FleetReportEntry(BaseModel):
    name: str
    path: str
    jobs: int | None = None


class FleetReportList(BaseModel):
    """The stored fleet reports this server can read, by name."""

    total: int
    items: list[FleetReportEntry] = Field(default_factory=list)


class StoredFleetReport(BaseModel):
    """One stored fleet report and where it is."""

    name: str
    path: str
    report: FleetReport


def fleet_roots(settings: Settings) -> list[Path]:
    return [*settings.fleet_dirs, settings.data_dir / "fleet"]


def find_reports(settings: Settings) -> dict[str, Path]:
    """Report name -> folder, first root first (a later folder of the same name is shadowed)."""
    found: dict[str, Path] = {}
    for root in fleet_roots(settings):
        if not root.is_dir():
            continue
        candidates = [root, *sorted(p for p in root.iterdir() if p.is_dir())]
        for d in candidates:
            if (d / REPORT_FILE).is_file():
                found.setdefault(d.name, d)
    return found


def list_reports(settings: Settings) -> FleetReportList:
    items = []
    for name, d in sorted(find_reports(settings).items()):
        try:
            jobs = FleetReport.model_validate_json((d / REPORT_FILE).read_bytes()).counts.get("jobs")
        except (OSError, ValidationError):
            jobs = None
        items.append(FleetReportEntry(name=name, path=str(d), jobs=jobs))
    return FleetReportList(total=len(items), items=items)


def load_report(settings: Settings, name: str | None = None) -> StoredFleetReport:
    """The named stored report, or the only one when ``name`` is None (404 / 409 otherwise)."""
    reports = find_reports(settings)
    if not reports:
        raise ApiError(404, "not_found", "no stored fleet report; run `straggler-lens fleet SOURCES -o DIR` "
                       "and start the server with --fleet-dir DIR")
    if name is None:
        if len(reports) > 1:
            raise ApiError(409, "ambiguous", "several fleet reports are stored; name one of: "
                           + ", ".join(sorted(reports)))
        name = next(iter(reports))
    d = reports.get(name)
    if d is None:
        raise not_found("fleet report", name, "stored: " + ", ".join(sorted(reports)))
    try:
        report = FleetReport.model_validate_json((d / REPORT_FILE).read_bytes())
    except (OSError, ValidationError) as exc:
        msg = f"{d / REPORT_FILE}: not a fleet report ({exc})"
        raise ApiError(422, "fleet_report_invalid", msg) from None
    return StoredFleetReport(name=name, path=str(d), report=report)
