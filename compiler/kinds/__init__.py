"""Model kinds: one home per ``materialized=`` value, each owning its config, its
compile-time plan, its runner, its verify and what it writes under ``target/run/``.

============  ==============================================================================
``view``      ``view.py``: ``CREATE OR REPLACE VIEW``
``table``     ``table.py``: a full rebuild (parquet blue/green slots, or one Delta
              ``CREATE OR REPLACE TABLE``)
``mv``        ``mv/``: a wide table refreshed by key
``fact``      ``fact/``: an append-mostly table built in idempotent steps
``seed``      ``seed.py``: a CSV file of the project loaded into a table (``mvflow seed``)
``incremental``  ``incremental.py``: dbt's: built once, then appended, overwritten by partition or
              merged with the SELECT rendered with ``is_incremental()`` true
``ephemeral`` ``ephemeral.py``: dbt's: no table; inlined as a CTE where it is ref()'d
``snapshot``  ``snapshot/``: dbt's: a type-2 history of the SELECT by ``unique_key`` (Delta ``MERGE``);
              ``mvflow snapshot`` and ``build`` run it
``numerator``  ``numerator/``: a persistent ``<shard_id, doc_id>`` per key tuple across generations,
              with a versioned state ``T.S.V.G`` (seed 001)
============  ==============================================================================

Callers ask a kind's fields and hooks (``base.ModelKind``) instead of comparing names. This
module builds a kind from a model's config (``create_kind``).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping

from ..sources import IDENTIFIER, parse_duration
from .base import COMMON_KEYS, KindError, ModelKind
from .fact import ON_SCHEMA_CHANGE, FactKind
from .ephemeral import EphemeralKind
from .incremental import STRATEGIES as INCREMENTAL_STRATEGIES, IncrementalKind
from .mv import MV_STRATEGIES, MvKind
from .numerator import NumeratorKind
from .seed import SeedKind
from .snapshot import SnapshotKind
from .table import TableKind
from .view import ViewKind

__all__ = ["COMMON_KEYS", "KINDS", "config_keys", "EphemeralKind", "FactKind", "IncrementalKind", "Kind", "KindError", "ModelKind", "MvKind",
           "NumeratorKind", "SeedKind", "SnapshotKind", "TableKind", "ViewKind",
           "create_kind"]

#: Delta refuses more clustering columns (``DELTA_CLUSTER_BY_INVALID_NUM_COLUMNS``).
MAX_CLUSTER_BY = 4

KINDS: dict[str, type[ModelKind]] = {k.name: k for k in (ViewKind, TableKind, MvKind, FactKind, SeedKind, IncrementalKind,
                                                         EphemeralKind, NumeratorKind, SnapshotKind)}
Kind = ViewKind | TableKind | MvKind | FactKind | SeedKind | IncrementalKind | EphemeralKind | NumeratorKind | SnapshotKind


def create_kind(config: Mapping[str, Any]) -> Kind:
    """Build the kind named by ``config['materialized']``; unknown kinds, keys or bad values raise
    a KindError whose ``errors`` are all the problems of the config.

    >>> create_kind({"materialized": "fact", "maxstep": 10, "delay": "5m"})
    FactKind(source=None, maxstep=10, delay_seconds=300, depends_on=(), partition_by=(), on_schema_change='fail')
    >>> create_kind({"materialized": "mv", "strategy": "full", "min_interval": "10m"}).min_interval_seconds
    600
    >>> create_kind({"materialized": "cube"})
    Traceback (most recent call last):
    ...
    compiler.kinds.base.KindError: unknown materialized='cube'
    >>> try:
    ...     create_kind({"materialized": "fact", "maxstep": 0, "delay": "soon", "size": 1})
    ... except KindError as exc:
    ...     print([str(e) for e in exc.errors])
    ["unknown config key for kind 'fact': size", 'maxstep must be a positive number, got 0', "invalid delay 'soon'"]
    >>> create_kind({"materialized": "seed", "publish": {"to": "app"}})
    Traceback (most recent call last):
    ...
    compiler.kinds.base.KindError: unknown config key for kind 'seed': publish
    """
    name = config.get("materialized", "view")
    cls = KINDS.get(name)
    if cls is None:
        raise KindError(f"unknown materialized={name!r}", "valid kinds: " + ", ".join(KINDS), "unknown-kind")
    own = {f.name for f in fields(cls)} - cls.not_config
    aliases = {alias: name for alias, name in _DURATIONS.items() if name in own}
    allowed = COMMON_KEYS | own | set(aliases)
    valid = "valid keys: " + ", ".join(sorted(allowed - set(_DURATIONS.values())))
    errors = [KindError(f"unknown config key for kind '{name}': {key}", valid, "unknown-config", key)
              for key in sorted(set(config) - allowed)]
    values = {}
    for key, value in config.items():
        field_name = aliases.get(key, key)
        if field_name in own:
            try:
                values[field_name] = _coerce(cls, field_name, value)
            except KindError as exc:
                errors.append(exc)
    errors += cls.check_config(values)
    if errors:
        errors[0].errors = errors
        raise errors[0]
    return cls(**values)


_DURATIONS = {"delay": "delay_seconds", "min_interval": "min_interval_seconds"}  # config key -> field in seconds


def config_keys(name: str) -> frozenset[str] | None:
    """The config keys kind ``name`` accepts (None: no such kind).

    >>> sorted(config_keys("seed") - COMMON_KEYS)
    ['cluster_by', 'column_types', 'delimiter', 'partition_by', 'quote_columns', 'unique_key']
    """
    cls = KINDS.get(name)
    if cls is None:
        return None
    own = {f.name for f in fields(cls)} - cls.not_config
    return frozenset(COMMON_KEYS | own | {alias for alias, field_name in _DURATIONS.items() if field_name in own})


def _coerce(cls: type[ModelKind], key: str, value: Any) -> Any:
    default = next(f.default for f in fields(cls) if f.name == key)
    alias = next((a for a, name in _DURATIONS.items() if name == key), None)
    if alias is not None:
        seconds = parse_duration(value)
        if seconds is None:
            raise KindError(f"invalid {alias} {value!r}", "write a duration like 30s, 10m, 2h or 1d", "bad-config", alias)
        return seconds
    if key == "cluster_by":
        return _cluster_by(value)
    if key == "publish":
        from ..publish.spec import parse_publish

        return None if value is None else parse_publish(value)  # none: not published (a config chosen by Jinja)
    if key == "column_types":
        if not isinstance(value, dict) or not all(isinstance(v, str) and v.strip() for v in value.values()):
            raise KindError(f"column_types must map columns to types, got {value!r}", "e.g. column_types={'id': 'bigint'}",
                            "bad-config", key)
        return tuple((str(k), str(v).strip()) for k, v in value.items())
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise KindError(f"{key} must be true or false, got {value!r}", f"e.g. {key}=true", "bad-config", key)
        return value
    if key == "incremental_strategy":
        if value not in INCREMENTAL_STRATEGIES:
            raise KindError(f"invalid incremental_strategy {value!r}", "valid strategies: " + ", ".join(INCREMENTAL_STRATEGIES),
                            "bad-config", key)
        return value
    if key == "on_schema_change":
        if value not in ON_SCHEMA_CHANGE:
            raise KindError(f"invalid on_schema_change {value!r}", "valid values: " + ", ".join(ON_SCHEMA_CHANGE), "bad-config", key)
        return value
    if key == "strategy" and cls is MvKind:
        if value not in MV_STRATEGIES:
            raise KindError(f"invalid strategy {value!r}", "valid strategies: " + ", ".join(MV_STRATEGIES), "bad-config", key)
        return value
    if isinstance(default, tuple):
        if isinstance(value, str):
            return (value,)
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise KindError(f"{key} must be a name or a list of names, got {value!r}", f"e.g. {key}=['a', 'b']", "bad-config", key)
    if isinstance(default, (int, float)):
        number = _number(type(default), value)
        zero_ok = key in cls.zero_ok
        if number is None or number < 0 or (number == 0 and isinstance(default, int) and not zero_ok):
            word = "a number of 0 or more" if zero_ok else "a positive number"
            raise KindError(f"{key} must be {word}, got {value!r}", f"e.g. {key}={default}", "bad-config", key)
        return number
    if (default is None or isinstance(default, str)) and not isinstance(value, str):
        raise KindError(f"{key} must be a name, got {value!r}", f"e.g. {key}='name'", "bad-config", key)
    return value


def _cluster_by(value: Any) -> tuple[str, ...]:
    """``cluster_by``: a column name or a list of at most ``MAX_CLUSTER_BY`` distinct names.

    >>> _cluster_by("shop_id"), _cluster_by(["a", "b"])
    (('shop_id',), ('a', 'b'))
    >>> _cluster_by(["a", "A"])
    Traceback (most recent call last):
    ...
    compiler.kinds.base.KindError: cluster_by names column 'A' twice
    """
    names = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, (list, tuple)) else None
    if names is None or not all(isinstance(v, str) and v.strip() for v in names):
        raise KindError(f"cluster_by must be a column name or a list of column names, got {value!r}",
                        "e.g. cluster_by='shop_id' or cluster_by=['shop_id', 'category']", "cluster-by", "cluster_by")
    seen: set[str] = set()
    for name in names:
        if not IDENTIFIER.fullmatch(name):
            raise KindError(f"cluster_by column '{name}' is not a plain column name", "use letters, digits and _ only",
                            "cluster-by", "cluster_by")
        if name.lower() in seen:
            raise KindError(f"cluster_by names column '{name}' twice", "list each column once", "cluster-by", "cluster_by")
        seen.add(name.lower())
    if len(names) > MAX_CLUSTER_BY:
        raise KindError(f"cluster_by lists {len(names)} columns; Delta clusters by at most {MAX_CLUSTER_BY}",
                        "keep the columns readers filter by most", "cluster-by", "cluster_by")
    return names


def _number(kind: type, value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    try:
        number = kind(value)
    except (TypeError, ValueError):
        return None
    return number if kind is float or number == float(value) else None
