"""The memkiln notebook: what happened last night, what failed and why, what it cost, which
projects are active. A marimo app: ``marimo edit notebooks/overview.py`` to explore,
``marimo run notebooks/overview.py`` to view, ``python notebooks/overview.py`` to run it top to
bottom. The database is the one memkiln uses (``MEMKILN_DB``, else the ``db`` of the config
file named by ``MEMKILN_CONFIG``, else ``data/memkiln.duckdb``), opened read-only.
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
    from memkiln.settings import load_settings
    from memkiln.transforms import charts

    return charts, frames, load_settings, memkiln, mo, pl


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
def _(answers, db, mo, newest):
    mo.md(
        f"""
        # memkiln: {db}

        {answers.projects.height} projects; newest session {newest or "none"}.
        Tables and views are documented inside the database:
        `select * from duckdb_columns() where comment is not null`.
        """
    )
    return


@app.cell
def _(answers, mo):
    last = answers.last_run
    verdict = (
        "no run recorded yet"
        if last.is_empty()
        else f"the last run ({last['command'][0]}, {last['started_at'][0]:%Y-%m-%d %H:%M} UTC) "
        f"ended **{last['status'][0]}**"
    )
    mo.vstack([mo.md(f"## What happened last night\n\n{verdict}"), last])
    return (last,)


@app.cell
def _(answers, charts, mo):
    mo.vstack(
        [
            mo.md("## What failed, and why"),
            answers.failures,
            charts.failures_by_reason(answers.failures),
        ]
    )
    return


@app.cell
def _(answers, charts, mo, query):
    failed_calls = query(
        "select project_key, tool, command, exit_code, error_line, started_at "
        "from v_tool_calls where failed order by started_at desc limit 50"
    )
    mo.vstack(
        [
            mo.md("### Tool calls that failed, per project and tool"),
            charts.tool_calls_by_project(answers.tool_failures),
            answers.tool_failures,
            mo.md("The latest failed calls:"),
            failed_calls,
        ]
    )
    return (failed_calls,)


@app.cell
def _(answers, charts, mo, pl):
    total = answers.costs.select(
        pl.col("cost_usd").sum(), pl.col("input_tokens").sum(), pl.col("output_tokens").sum()
    ).row(0)
    mo.vstack(
        [
            mo.md(
                f"## What it cost\n\n${total[0] or 0:.4f} in total: "
                f"{total[1] or 0:,} tokens in, {total[2] or 0:,} tokens out"
            ),
            charts.cost_per_day(answers.costs),
            answers.costs,
        ]
    )
    return (total,)


@app.cell
def _(answers, charts, mo):
    mo.vstack(
        [
            mo.md("## Which projects are active"),
            charts.sessions_per_day(answers.sessions_daily),
            answers.projects,
        ]
    )
    return


@app.cell
def _(answers, mo):
    mo.vstack([mo.md("## Secrets redacted, per rule and day"), answers.redactions])
    return


@app.cell
def _(mo, query):
    schema = query(
        "select table_name, column_name, comment from duckdb_columns() "
        "where table_name like 'v\\_%' escape '\\' and not internal "
        "order by table_name, column_index"
    )
    mo.vstack([mo.md("## The views and what their columns mean"), schema])
    return (schema,)


if __name__ == "__main__":
    app.run()
