-- What the risk and copied-instruction filters (memkiln/transforms/trust.py) dropped from a
-- consolidation's memory files, counted in its run record.
alter table runs add column memory_lines_dropped bigint not null default 0;
comment on column runs.memory_lines_dropped is 'Memory lines dropped before writing: a risky command recommended (a download piped into a shell, a force push, a history rewrite, disabled checks, rm -rf outside the project, credentials on the command line, a host other than a package registry) or an instruction copied from a tool''s output or an injected text. Consolidation runs only.';
