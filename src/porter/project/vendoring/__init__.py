"""Vendoring the runtime into a ported tree: where its one copy goes (runtime_home), what
of it the port uses (runtime_modules), writing and growing the copy (runtime_copy), the probes
that tell a copy's state (runtime_probes), and keeping linters off it (lint_exempt)."""
