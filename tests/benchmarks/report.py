"""The printed table: one figure a line, ``figure / value / target``, section by section."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Row = tuple[str, str, str]


def _pair(figures: dict[str, float] | None) -> str:
    if not figures:
        return "-"
    return f"{figures['p50_ms']:.1f} / {figures['p99_ms']:.1f}"


def _each(values: list[float], digits: int = 0) -> str:
    return " ".join(f"{v:.{digits}f}" for v in values)


def _paired(prefix: str, paired: dict[str, Any], ours: str, target: str) -> list[Row]:
    rounds = paired["rounds"]
    rate = "calls_per_s"
    return [(f"{prefix}: {ours} calls/s, each round", _each([r[rate] for r in rounds]), ""),
            (f"{prefix}: bare Celery tasks/s, each round", _each([r["tasks_per_s"] for r in rounds]), ""),
            (f"{prefix}: ratios, each round", _each([r["ratio"] for r in rounds], 2), ""),
            (f"{prefix}: median ratio", f"{paired['median_ratio']:.2f}x" if rounds else "-", target)]


def headline_rows(h: dict[str, Any]) -> list[Row]:
    rows = _paired("headline", h["paired"], "toolrelay", ">= 0.6x")
    under = h.get("under_load", {})
    if under:
        cpu = under["cpu_ms_per_call"]
        rows += [("under load submit->terminal p50/p99 ms", _pair(under["submit_to_terminal"]), ""),
                 ("under load POST answer p50/p99 ms", _pair(under["post_answer"]), ""),
                 ("under load GETs per call (long-polls)", f"{under['gets_per_call']:.2f}", ""),
                 ("bare Celery under load round trip p50/p99", _pair(under["bare_round_trip"]), ""),
                 ("CPU ms/call gw / worker / beat / pg / client",
                  " / ".join(f"{cpu.get(k, 0):.2f}" for k in ("gateway", "worker", "beat", "postgres", "client")), ""),
                 ("bare Celery CPU ms/task worker / clients",
                  " / ".join(f"{under['bare_cpu_ms_per_task'][k]:.2f}" for k in ("worker", "clients")), "")]
    low, bare_low = h.get("low_load"), h.get("bare_low_load")
    if low and bare_low:
        ratio = low["submit_to_terminal"]["p50_ms"] / bare_low["round_trip"]["p50_ms"]
        rows += [("low load submit->success p50/p99 ms", _pair(low["submit_to_terminal"]), ""),
                 ("low load bare Celery round trip p50/p99", _pair(bare_low["round_trip"]), ""),
                 ("low load p50 toolrelay / bare Celery", f"{ratio:.1f}x", "<= 3x"),
                 ("low load POST wait_s round trip p50/p99", _pair(h["low_load_post_wait"]["round_trip"]), "")]
    memory = h.get("memory_mb")
    if memory:
        rows += [("RSS MiB gateway / worker main / beat",
                  f"{memory['gateway']:.0f} / {memory['worker_main']:.0f} / {memory['beat']:.0f}", ""),
                 ("RSS MiB worker pool children", _each(memory["worker_children"]), ""),
                 ("RSS MiB bare worker main / children",
                  f"{memory['bare_worker_main']:.0f} / {_each(memory['bare_worker_children'])}", "")]
    failures = under.get("failures", 0) + sum(part.get("rejected", 0) + part.get("not_success", 0)
                                              for part in (low or {},))
    stock = h.get("stock")
    if stock:
        rows += _paired("headline on kombu's Redis path", stock["paired"], "toolrelay", "")
        failures += sum(r["ours"]["rejected"] + r["ours"]["not_success"] + r["bare"]["failed"]
                        for r in stock["paired"]["rounds"])
    rows.append(("headline rejected, not success or lost", str(failures), "0"))
    return rows


def gateway_rows(g: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for kind, label, target in (("get", "GET terminal", ">= 0.5x"), ("post", "POST 202, no worker", ">= 0.25x")):
        part = g[kind]
        ours, bare = part["toolrelay"], part["bare"]
        rows += [(f"gateway {label} req/s gw / bare FastAPI",
                  f"{ours['requests_per_s']:.0f} / {bare['requests_per_s']:.0f}", ""),
                 (f"gateway {label} ratio", f"{part['ratio']:.2f}x", target),
                 (f"gateway {label} p99 ms gw / bare", f"{ours['p99_ms']:.1f} / {bare['p99_ms']:.1f}", "")]
        wrong = sum(ours["unexpected"].values()) + sum(bare["unexpected"].values())
        if wrong:
            rows.append((f"gateway {label} unexpected answers", str(wrong), "0"))
    sizes = g["body_bytes"]
    rows.append(("gateway bodies bytes terminal / accepted", f"{sizes['terminal']} / {sizes['accepted']}", ""))
    return rows


def _cpu(side: dict[str, Any]) -> str:
    return f"{side['gateway_cpu_ms_per_request']:.3f} / {side['postgres_cpu_ms_per_request']:.3f}"


def scale_rows(s: dict[str, Any]) -> list[Row]:
    gen = s["generation"]
    get, lat, post = s["get_rate"], s["get_latency"], s["post_rate"]
    wrong = sum(part[side]["unexpected"] for part in (get, lat, post) for side in ("empty", "full"))
    return [
        ("scale: receipts generated / seconds / rows/s",
         f"{gen['rows']:,} / {gen['generate_s']:.0f} / {gen['rows_per_s']:,}", ""),
        ("scale: ANALYZE s / CHECKPOINT s / table + indexes MiB",
         f"{gen['analyze_s']:.0f} / {gen['checkpoint_s']:.0f} / {gen['table_and_indexes_mb']:,}", ""),
        ("scale: GET req/s empty / full", f"{get['empty']['requests_per_s']:.0f} / {get['full']['requests_per_s']:.0f}",
         ""),
        ("scale: GET rate change", f"{get['rate_change_pct']:+.1f} %", "within 10 %"),
        ("scale: GET CPU ms/request gw / pg, empty", _cpu(get["empty"]), ""),
        ("scale: GET CPU ms/request gw / pg, full", _cpu(get["full"]), ""),
        ("scale: GET one at a time p50/p99 ms, empty", f"{lat['empty']['p50_ms']:.2f} / {lat['empty']['p99_ms']:.2f}",
         ""),
        ("scale: GET one at a time p50/p99 ms, full", f"{lat['full']['p50_ms']:.2f} / {lat['full']['p99_ms']:.2f}",
         "p99 < 5 ms"),
        ("scale: GET one at a time p50/p99 change ms", " / ".join(
            f"{lat['full'][q] - lat['empty'][q]:+.2f}" for q in ("p50_ms", "p99_ms")), ""),
        ("scale: POST req/s empty / full",
         f"{post['empty']['requests_per_s']:.0f} / {post['full']['requests_per_s']:.0f}", ""),
        ("scale: POST rate change", f"{post['rate_change_pct']:+.1f} %", "within 10 %"),
        ("scale: POST CPU ms/request gw / pg, empty / full", f"{_cpu(post['empty'])} / {_cpu(post['full'])}", ""),
        ("scale: SQL alone, one at a time p50/p99 ms, empty", _pair(s["sql_latency"]["empty"]), ""),
        ("scale: SQL alone, one at a time p50/p99 ms, full", _pair(s["sql_latency"]["full"]), ""),
        ("scale: page cache MiB at the end / table + indexes MiB",
         f"{s['page_cache_mb']:,} / {gen['table_and_indexes_mb']:,}", ""),
        ("scale: unexpected answers", str(wrong), "0"),
    ]


def dev_rows(d: dict[str, Any]) -> list[Row]:
    rows = _paired("dev", d["paired"], "toolrelay dev", ">= 0.3x")
    low, bare_low = d.get("low_load"), d.get("bare_low_load")
    if low and bare_low:
        rows += [("dev low load submit->success p50/p99 ms", _pair(low["submit_to_terminal"]), ""),
                 ("dev low load bare Celery round trip p50/p99", _pair(bare_low["round_trip"]), ""),
                 ("dev low load p50 dev / bare Celery",
                  f"{low['submit_to_terminal']['p50_ms'] / bare_low['round_trip']['p50_ms']:.1f}x", "")]
    failures = sum(r["ours"]["rejected"] + r["ours"]["not_success"] + r["bare"]["failed"]
                   for r in d["paired"]["rounds"])
    rows += [("dev RSS MiB (process / children)",
              f"{d['memory_mb']['dev']:.0f} / {_each(d['memory_mb']['children']) or '-'}", ""),
             ("dev rejected, not success or lost", str(failures), "0")]
    return rows


def workers_rows(w: dict[str, Any]) -> list[Row]:
    drain, bare = w["drain"], w["bare_drain"]
    return [("worker alone, queue drain calls/s", f"{drain['calls_per_s']}", ""),
            ("bare Celery worker alone, drain tasks/s", f"{bare['tasks_per_s']}", ""),
            ("ratio of the drains", f"{drain['calls_per_s'] / bare['tasks_per_s']:.2f}x", ""),
            ("worker CPU ms/call, drain: toolrelay / bare",
             f"{drain['worker_cpu_ms_per_call']:.2f} / {bare['cpu_ms_per_task']:.2f}", ""),
            ("bare Celery tasks/s, kombu / toolrelay transport",
             f"{w['transport']['kombu']:.0f} / {w['transport']['toolrelay']:.0f}", ""),
            ("drain not success", str(drain["not_success"] + drain["calls"] - drain["accepted"]), "0")]


def round_trip_rows(t: dict[str, Any]) -> list[Row]:
    return [(f"round trips/call {role}: SQL / Redis",
             f"{t[f'{role}_postgres']['round_trips_per_call']} / {t[f'{role}_redis']['round_trips_per_call']}", "")
            for role in ("gateway", "worker")] + [("round trips run: GETs per call", f"{t['gets_per_call']}", "")]


def webhook_rows(w: dict[str, Any]) -> list[Row]:
    signatures = w["signatures"]
    return [("webhook deliveries/s (dispatcher)", f"{w['dispatcher']['deliveries_per_s']}", ""),
            ("bare aiohttp posts/s, same bodies", f"{w['bare_aiohttp']['posts_per_s']}", ""),
            ("ratio dispatcher / bare aiohttp", f"{w['ratio']:.2f}x", ">= 0.3x"),
            ("attempts logged / signatures ok / bad",
             f"{w['dispatcher']['attempts_logged']} / {signatures['verified']} / {signatures['bad']}", "")]


def agent_rows(a: dict[str, Any]) -> list[Row]:
    batches, loop = a["batches"], a["loop"]
    batch_cpu = batches["batch_accept"]["gateway_cpu_ms_per_request"]
    single_cpu = batches["single_accept"]["gateway_cpu_ms_per_request"]
    return [("batch of 8: round trip p50/p99 ms", _pair(batches["round_trip"]), ""),
            ("gateway CPU ms: batch of 8 / 2 single submits", f"{batch_cpu:.2f} / {2 * single_cpu:.2f}",
             "batch < 2 singles"),
            ("gateway CPU: batch of 8 / 2 singles, median of the rounds' ratios", f"{batches['paired_ratio']:.2f}x",
             "< 1x"),
            ("batches not completed", str(batches["not_completed"]), "0"),
            ("accepts not 202: batches / singles", f"{sum(batches['batch_accept']['unexpected'].values())} / "
                                                    f"{sum(batches['single_accept']['unexpected'].values())}", "0"),
            ("run loop: toolrelay ms per iteration p50/p99", _pair(loop["per_iteration"]), "milliseconds"),
            ("runs not success", str(loop["failed"]), "0")]


ROWS: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "headline": headline_rows, "gateway": gateway_rows, "scale": scale_rows, "dev": dev_rows,
    "workers": workers_rows, "round_trips": round_trip_rows, "webhooks": webhook_rows, "agents": agent_rows,
}


def table(results: dict[str, Any]) -> str:
    """The figures of every section that ran, with DESIGN.md's targets beside them."""
    rows: list[Row] = []
    for name, section in results.items():
        if name in ROWS:
            rows += ROWS[name](section)
    if not rows:
        return "(no figures)"
    width = max(len(r[0]) for r in rows)
    value_width = max(24, max(len(r[1]) for r in rows))
    lines = [f"{'figure':<{width}}  {'value':>{value_width}}  target", "-" * (width + value_width + 16)]
    lines += [f"{name:<{width}}  {value:>{value_width}}  {target}" for name, value, target in rows]
    return "\n".join(lines)
