"""The memkiln notebook: what happened last night, what failed and why, what it cost, which
projects are active. A marimo app: ``marimo edit notebooks/overview.py`` to explore,
``marimo run notebooks/overview.py`` to view, ``python notebooks/overview.py`` to run it top to
bottom and print its tables, ``python notebooks/overview.py --html overview.html`` to also
write it as one static page that opens offline (marimo's ``export html`` page loads marimo's
front end from the network). The database is the one memkiln uses (``MEMKILN_DB``, else the
``db`` of the config file named by ``MEMKILN_CONFIG``, else ``data/memkiln.duckdb``), opened
read-only.
"""

import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import marimo as mo
    import polars as pl

    import memkiln
    from memkiln.io.analytics import frames
    from memkiln.io.notebook_page import part
    from memkiln.settings import load_settings
    from memkiln.transforms import charts

    return charts, frames, load_settings, memkiln, mo, part, pl


@app.cell
def _(frames, load_settings, memkiln):
    # The database memkiln's commands use: MEMKILN_DB, the config file's `db`, or the default.
    # One read-only connection, closed as soon as the answers are read: a notebook left open
    # all day holds no lock on the database.
    db = load_settings()[0].db
    con = memkiln.connect(db)
    try:
        answers = frames(con)
        newest = con.execute("select max(updated_at) from rollouts").fetchall()[0][0]
    finally:
        con.close()

    def query(text: str, params: dict | None = None):
        """Run any SQL on the database (read-only; the connection is closed again)."""
        c = memkiln.connect(db)
        try:
            return c.sql(text, params=params).pl()
        finally:
            c.close()

    return answers, db, newest, query


@app.cell
def _(answers, db, newest, part):
    page_header = part(
        f"""
        # memkiln: {db}

        {answers.projects.height} projects; newest session {newest or "none"}.
        Tables and views are documented inside the database:
        `select * from duckdb_columns() where comment is not null`.
        """
    )
    page_header
    return (page_header,)


@app.cell
def _(answers, charts, part):
    last = answers.last_run
    if last.is_empty():
        verdict = "no run recorded yet"
    else:
        dry = bool(last["dry_run"][0])
        verdict = (
            f"the last {'dry run' if dry else 'run'} ({last['command'][0]}"
            f"{' --dry-run' if dry else ''}, {last['started_at'][0]:%Y-%m-%d %H:%M} UTC, "
            f"{last['seconds'][0] or 0:,.1f} s) ended **{last['status'][0]}**"
            + (": it only estimated; nothing was extracted or written" if dry else "")
        )
    page_last_run = part(
        f"## What happened last night\n\n{verdict}",
        last,
        "### Run history",
        charts.runs_over_time(answers.run_history),
        answers.run_history,
    )
    page_last_run
    return last, page_last_run


@app.cell
def _(answers, charts, part):
    page_failures = part(
        "## What failed in memkiln, and why",
        charts.failures_by_reason(answers.failures),
        answers.failures,
    )
    page_failures
    return (page_failures,)


@app.cell
def _(answers, charts, part, query):
    failed_calls = query(
        "select project_key, tool_kind, tool, command, exit_code, error_line, started_at "
        "from v_tool_calls where failed order by started_at desc limit 50"
    )
    page_tools = part(
        "## The agents' tool calls that failed, per kind of tool and project",
        charts.tool_calls_by_kind(answers.tool_failures),
        answers.tool_failures,
        charts.tool_calls_by_project(answers.projects),
        "The latest failed calls:",
        failed_calls,
    )
    page_tools
    return failed_calls, page_tools


@app.cell
def _(answers, charts, part, pl):
    total = answers.costs.select(
        pl.col("model_requests").sum(),
        pl.col("cost_usd").sum(),
        pl.col("input_tokens").sum(),
        pl.col("output_tokens").sum(),
    ).row(0)
    page_costs = part(
        f"## What it cost\n\n{total[0] or 0:,} model requests, ${total[1] or 0:.4f} in total: "
        f"{total[2] or 0:,} tokens in, {total[3] or 0:,} tokens out",
        charts.cost_per_day(answers.costs),
        answers.costs,
        "### Estimated, then spent: each dry run beside the next run",
        answers.estimates,
    )
    page_costs
    return page_costs, total


@app.cell
def _(answers, charts, part):
    page_projects = part(
        "## Which projects are active",
        charts.sessions_per_day(answers.sessions_daily),
        answers.projects,
    )
    page_projects
    return (page_projects,)


@app.cell
def _(answers, part):
    page_redactions = part("## Secrets redacted, per rule and day", answers.redactions)
    page_redactions
    return (page_redactions,)


@app.cell
def _(part, query):
    schema = query(
        "select table_name, column_name, comment from duckdb_columns() "
        "where table_name like 'v\\_%' escape '\\' and not internal "
        "order by table_name, column_index"
    )
    page_schema = part("## The views and what their columns mean", schema)
    page_schema
    return page_schema, schema


@app.cell
def _(
    mo,
    page_costs,
    page_failures,
    page_header,
    page_last_run,
    page_projects,
    page_redactions,
    page_schema,
    page_tools,
):
    # Run as a script, the notebook prints every table; `--html PATH` also writes it as one
    # static page that opens offline (the chart library and the data inside the file).
    if mo.app_meta().mode == "script":
        from memkiln.io.notebook_page import show

        show(
            [
                page_header,
                page_last_run,
                page_failures,
                page_tools,
                page_costs,
                page_projects,
                page_redactions,
                page_schema,
            ],
            html=mo.cli_args().get("html"),
        )
    return


if __name__ == "__main__":
    app.run()
