"""A generated, realistic project of N models, written twice: in mvflow's format and as the
equivalent dbt project (same SQL; ``mv`` becomes a dbt ``table``, ``fact`` an ``incremental``).

Shape (deterministic for a seed): ``max(4, N // 25)`` sources with declared columns; one
staging view per source (a quarter of them ``SELECT s.*``); the other models in four layers
of views and tables that ref 1–2 models of earlier layers (joins on shared id columns,
aggregates, CTEs with a window, unions, macro calls, a few ``a.*``); about 2% ``mv`` models
(a source joined to two others, keyed by the main source's key) and 2% ``fact`` models.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

MACROS = """\
{# Round a money amount to cents, keeping NULLs. #}
{% macro money(expr) -%}
  CAST(ROUND({{ expr }}, 2) AS DECIMAL(12, 2))
{%- endmacro %}

{# The standard filter for live rows of a soft-deleting source. #}
{% macro live(alias, flag='is_deleted') -%}
  NOT {{ alias }}.{{ flag }}
{%- endmacro %}

{# a / b, NULL when b is 0. #}
{% macro safe_div(a, b) -%}
  CASE WHEN {{ b }} = 0 THEN NULL ELSE {{ a }} / {{ b }} END
{%- endmacro %}

{# A status bucket shared by many models. #}
{% macro status_bucket(col) -%}
  CASE {% for s in ['active', 'hidden', 'archived'] %}WHEN {{ col }} = '{{ s }}' THEN {{ loop.index }} {% endfor %}ELSE 0 END
{%- endmacro %}
"""

_SOURCE_TYPES = {"name": "string", "status": "string", "amount": "decimal(12,2)", "qty": "int",
                 "created_at": "timestamp", "updated_at": "timestamp", "change_id": "bigint", "is_deleted": "boolean"}


@dataclass
class Rel:
    """What the generator knows of a source or model: its id columns and string columns."""

    name: str
    ids: list[str]
    strings: list[str]
    layer: int = 0
    kind: str = "view"


@dataclass
class GenModel:
    name: str
    folder: str
    kind: str
    body: str  # the SQL after the config() line, with ref()/source() calls
    dbt_filter: str = ""  # dbt's is_incremental() filter for facts
    mv_key: str = ""
    rel: Rel | None = None


@dataclass
class Generated:
    sources: list[Rel]
    models: list[GenModel] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for m in self.models:
            counts[m.kind] = counts.get(m.kind, 0) + 1
        return counts


def generate(n_models: int, seed: int = 1) -> Generated:
    """The project's content for ``n_models`` models (at least one staging model per source)."""
    rng = random.Random(seed)
    n_sources = max(4, n_models // 25)
    sources = [_source_rel(i, n_sources, rng) for i in range(n_sources)]
    gen = Generated(sources)
    for src in sources[:n_models]:
        gen.models.append(_staging(src, rng))
    rest = n_models - len(gen.models)
    n_special = max(0, rest // 50)
    layers: dict[int, list[Rel]] = {0: [m.rel for m in gen.models if m.rel]}
    for i in range(rest - 2 * n_special):
        layer = 1 + i * 4 // max(1, rest - 2 * n_special)
        model = _layer_model(f"int_l{layer}_{i:05d}", layer, layers, rng)
        layers.setdefault(layer, []).append(model.rel)
        gen.models.append(model)
    for i in range(n_special):
        gen.models.append(_mv(f"mv_{i:04d}", sources, rng))
        gen.models.append(_fact(f"fact_{i:04d}", sources, layers[0], rng))
    return gen


def _source_rel(i: int, n: int, rng: random.Random) -> Rel:
    others = rng.sample([j for j in range(n) if j != i], 2)
    return Rel(f"src_{i:03d}", [f"src_{i:03d}_id"] + [f"src_{j:03d}_id" for j in others], ["name", "status"])


def _staging(src: Rel, rng: random.Random) -> GenModel:
    rel = Rel(f"stg_{src.name}", list(src.ids), list(src.strings), 0, "view")
    if rng.random() < 0.25:
        body = f"-- Live rows of {src.name}, all columns.\nSELECT s.*\nFROM {{{{ source('raw', '{src.name}') }}}} AS s\nWHERE {{{{ live('s') }}}}\n"
    else:
        ids = "".join(f"  s.{c},\n" for c in src.ids)
        body = (f"-- Live rows of {src.name}.\nSELECT\n{ids}  s.name,\n  s.status,\n  {{{{ money('s.amount') }}}} AS amount,\n"
                f"  s.qty,\n  s.updated_at\nFROM {{{{ source('raw', '{src.name}') }}}} AS s\nWHERE {{{{ live('s') }}}}\n")
    return GenModel(rel.name, "staging", "view", body, rel=rel)


def _pick_parents(layer: int, layers: dict[int, list[Rel]], rng: random.Random) -> tuple[Rel, Rel | None]:
    pool = layers.get(layer - 1) or layers[0]
    if rng.random() < 0.3:
        pool = [r for k in range(layer) for r in layers.get(k, [])]
    a = rng.choice(pool)
    partners = [r for r in rng.sample(pool, min(len(pool), 12)) if r is not a and set(r.ids) & set(a.ids)]
    return a, (partners[0] if partners else None)


def _layer_model(name: str, layer: int, layers: dict[int, list[Rel]], rng: random.Random) -> GenModel:
    a, b = _pick_parents(layer, layers, rng)
    shape = rng.choices(["join", "aggregate", "window", "macro", "union", "star"], [30, 20, 15, 20, 8, 7])[0]
    if shape in ("join", "union") and b is None:
        shape = "macro"
    body, rel = {"join": _join, "aggregate": _aggregate, "window": _window, "macro": _macro_heavy,
                 "union": _union, "star": _star}[shape](name, a, b, rng)
    kind = "table" if rng.random() < 0.5 else "view"
    rel.layer, rel.kind = layer, kind
    return GenModel(name, f"intermediate/layer{layer}", kind, body, rel=rel)


def _ref(rel: Rel) -> str:
    return f"{{{{ ref('{rel.name}') }}}}"


def _join(name: str, a: Rel, b: Rel, rng: random.Random):
    key = sorted(set(a.ids) & set(b.ids))[0]
    extra = [c for c in b.ids if c not in a.ids][:1]
    strings = [f"{s}_of_{b.name}" for s in b.strings[:1] if f"{s}_of_{b.name}" not in a.strings]
    cols = [f"a.{c}" for c in a.ids] + [f"b.{c}" for c in extra] + [f"a.{s}" for s in a.strings]
    cols += [f"b.{s.split('_of_')[0]} AS {s}" for s in strings]
    cols += ["a.amount + COALESCE(b.amount, 0) AS amount", "a.qty", "GREATEST(a.updated_at, b.updated_at) AS updated_at"]
    where = "\nWHERE a.status <> 'archived'" if rng.random() < 0.5 else ""
    body = (f"-- {a.name} with attributes of {b.name}.\nSELECT\n  " + ",\n  ".join(cols) +
            f"\nFROM {_ref(a)} AS a\nLEFT JOIN {_ref(b)} AS b\n  ON b.{key} = a.{key}{where}\n")
    return body, Rel(name, a.ids + extra, a.strings + strings)


def _aggregate(name: str, a: Rel, b, rng: random.Random):
    keys = a.ids[: rng.choice([1, 2])]
    group = ", ".join(f"a.{k}" for k in keys)
    body = (f"-- Totals of {a.name} per {', '.join(keys)}.\nSELECT\n  " + ",\n  ".join(f"a.{k}" for k in keys) +
            ",\n  MAX(a.status) AS status,\n  {{ money('SUM(a.amount)') }} AS amount,\n  CAST(SUM(a.qty) AS INT) AS qty,\n"
            f"  MAX(a.updated_at) AS updated_at,\n  COUNT(*) AS n_rows\nFROM {_ref(a)} AS a\nGROUP BY {group}\n"
            "HAVING COUNT(*) > 0\n")
    return body, Rel(name, keys, ["status"])


def _window(name: str, a: Rel, b, rng: random.Random):
    key = a.ids[0]
    cols = ", ".join(a.ids + a.strings + ["amount", "qty", "updated_at"])
    body = (f"-- The latest row of {a.name} per {key}.\nWITH base AS (\n  SELECT {cols}\n  FROM {_ref(a)}\n),\n"
            f"ranked AS (\n  SELECT\n    base.*,\n    ROW_NUMBER() OVER (PARTITION BY {key} ORDER BY updated_at DESC) AS rn\n  FROM base\n)\n"
            f"SELECT {cols}\nFROM ranked\nWHERE rn = 1\n")
    return body, Rel(name, list(a.ids), list(a.strings))


def _macro_heavy(name: str, a: Rel, b, rng: random.Random):
    ids = "".join(f"  a.{c},\n" for c in a.ids)
    strings = "".join(f"  UPPER(a.{s}) AS {s},\n" for s in a.strings)
    body = (f"-- {a.name} with derived measures.\nSELECT\n{ids}{strings}"
            "  {{ money('a.amount * 1.2') }} AS amount,\n  a.qty,\n  {{ safe_div('a.amount', 'a.qty') }} AS unit_price,\n"
            "  {{ status_bucket('a.status') }} AS status_rank,\n  a.updated_at\n"
            f"FROM {_ref(a)} AS a\nWHERE a.qty >= {rng.randint(0, 5)}\n")
    return body, Rel(name, list(a.ids), list(a.strings))


def _union(name: str, a: Rel, b: Rel, rng: random.Random):
    key = sorted(set(a.ids) & set(b.ids))[0]
    part = "SELECT {k}, status, '{n}' AS origin, amount, qty, updated_at\nFROM {r}"
    body = (f"-- Rows of {a.name} and {b.name} by {key}.\n" + part.format(k=key, n=a.name, r=_ref(a)) +
            "\nUNION ALL\n" + part.format(k=key, n=b.name, r=_ref(b)) + "\n")
    return body, Rel(name, [key], ["status", "origin"])


def _star(name: str, a: Rel, b, rng: random.Random):
    body = (f"-- Every column of {a.name} plus a flag.\nSELECT\n  a.*,\n  a.amount > 100 AS large_in_{name}\n"
            f"FROM {_ref(a)} AS a\n")
    return body, Rel(name, list(a.ids), list(a.strings))


def _mv(name: str, sources: list[Rel], rng: random.Random) -> GenModel:
    main = rng.choice(sources)
    key = main.ids[0]
    joins, cols = [], [f"m.{key}", "m.name", "m.status", "m.amount"]
    for n, fk in enumerate(main.ids[1:]):
        other = next(s for s in sources if s.ids[0] == fk)
        alias = f"j{n}"
        join = "JOIN" if n == 0 else "LEFT JOIN"
        joins.append(f"{join} {{{{ source('raw', '{other.name}') }}}} AS {alias}\n  ON {alias}.{fk} = m.{fk} AND {alias}.is_deleted = FALSE")
        cols += [f"{alias}.name AS {alias}_name", f"{alias}.status AS {alias}_status"]
    body = (f"-- {main.name} widened with its parents, refreshed by key.\nSELECT\n  " + ",\n  ".join(cols) +
            f"\nFROM {{{{ source('raw', '{main.name}') }}}} AS m\n" + "\n".join(joins) + "\nWHERE m.is_deleted = FALSE\n")
    return GenModel(name, "marts", "mv", body, mv_key=key)


def _fact(name: str, sources: list[Rel], staged: list[Rel], rng: random.Random) -> GenModel:
    main = rng.choice(sources)
    fk = main.ids[1]
    dim = next(r for r in staged if r.ids[0] == fk)
    body = (f"-- Changes of {main.name} with attributes of {dim.name}, in steps.\nSELECT\n  e.{main.ids[0]},\n  e.{fk},\n"
            f"  e.amount,\n  e.qty,\n  e.updated_at,\n  e.change_id,\n  d.name AS {dim.name}_name\n"
            f"FROM {{{{ source('raw', '{main.name}') }}}} AS e\nLEFT JOIN {_ref(dim)} AS d\n  ON d.{fk} = e.{fk}\n")
    dbt_filter = "{% if is_incremental() %}\nWHERE e.change_id > (SELECT MAX(change_id) FROM {{ this }})\n{% endif %}\n"
    return GenModel(name, "marts", "fact", body, dbt_filter=dbt_filter)


# -- writing ----------------------------------------------------------------------------------

def write_mvflow(gen: Generated, root: Path) -> Path:
    """The mvflow project: project.yml, lineage/raw.yml, macros/, models/."""
    files = {
        "project.yml": _MVFLOW_PROJECT,
        "lineage/raw.yml": "sources:\n" + "".join(_mvflow_source(s) for s in gen.sources),
        "macros/common.sql": MACROS,
        "models/marts/marts.yml": _model_docs(gen),
    }
    for m in gen.models:
        files[f"models/{m.folder}/{m.name}.sql"] = _mvflow_config(m) + m.body
    return _write(root, files)


def write_dbt(gen: Generated, root: Path) -> Path:
    """The equivalent dbt project: dbt_project.yml, profiles.yml (Spark, session), sources, models."""
    files = {
        "dbt_project.yml": _DBT_PROJECT,
        "profiles.yml": _DBT_PROFILES.format(warehouse=root / "warehouse"),
        "models/sources.yml": _dbt_sources(gen.sources),
        "macros/common.sql": MACROS,
        "models/marts/marts.yml": _model_docs(gen),
    }
    for m in gen.models:
        files[f"models/{m.folder}/{m.name}.sql"] = _dbt_config(m) + m.body + m.dbt_filter
    return _write(root, files)


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return root


def _mvflow_config(m: GenModel) -> str:
    if m.kind == "mv":
        return f"{{{{ config(materialized='mv', unique_key=['{m.mv_key}']) }}}}\n"
    if m.kind == "fact":
        return "{{ config(materialized='fact', maxstep=100000, delay='1m') }}\n"
    return "{{ config(materialized='table') }}\n" if m.kind == "table" else ""


def _dbt_config(m: GenModel) -> str:
    if m.kind == "mv":
        return "{{ config(materialized='table') }}\n"
    if m.kind == "fact":
        return "{{ config(materialized='incremental', incremental_strategy='append') }}\n"
    return "{{ config(materialized='table') }}\n" if m.kind == "table" else ""


def _mvflow_source(s: Rel) -> str:
    cols = "".join(f"      - {{name: {c}, type: bigint}}\n" for c in s.ids)
    cols += "".join(f"      - {{name: {c}, type: \"{t}\"}}\n" for c, t in _SOURCE_TYPES.items())
    return (f"  - name: {s.name}\n    database: raw\n    description: Generated source {s.name}.\n"
            f"    primary_key: [{s.ids[0]}]\n    position: [updated_at, change_id]\n    deleted: is_deleted\n"
            f"    columns:\n{cols}")


def _dbt_sources(sources: list[Rel]) -> str:
    out = "version: 2\nsources:\n  - name: raw\n    schema: raw\n    tables:\n"
    for s in sources:
        cols = "".join(f"          - {{name: {c}, data_type: bigint}}\n" for c in s.ids)
        cols += "".join(f"          - {{name: {c}, data_type: \"{t}\"}}\n" for c, t in _SOURCE_TYPES.items())
        out += f"      - name: {s.name}\n        description: Generated source {s.name}.\n        columns:\n{cols}"
    return out


def _model_docs(gen: Generated) -> str:
    out = "models:\n"
    for m in gen.models:
        if m.folder == "marts":
            out += f"  - name: {m.name}\n    description: Generated {m.kind} model {m.name}.\n"
    return out if out != "models:\n" else "models: []\n"


_MVFLOW_PROJECT = """\
name: bench
version: "1.0"
models:
  +materialized: view
  staging:
    +schema: staging
  intermediate:
    +schema: intermediate
  marts:
    +schema: marts
"""

_DBT_PROJECT = """\
name: bench
version: "1.0"
config-version: 2
profile: bench
model-paths: [models]
macro-paths: [macros]
models:
  bench:
    +materialized: view
    staging:
      +schema: staging
    intermediate:
      +schema: intermediate
    marts:
      +schema: marts
"""

_DBT_PROFILES = """\
bench:
  target: local
  outputs:
    local:
      type: spark
      method: session
      host: NA
      schema: bench
      server_side_parameters:
        spark.sql.warehouse.dir: "{warehouse}"
"""
