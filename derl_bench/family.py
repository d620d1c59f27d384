"""One typed description per env family, built from its card: :class:`FamilySpec`.

Every stage asks :func:`family_spec` what a family is, instead of parsing env ids or keeping
its own table of families::

    >>> spec = family_spec("derl_bench:derl/ALFWorld-v0")
    >>> spec.name, spec.multi_turn, spec.success_primitive, spec.max_steps
    ('alfworld', True, 'success', 30)
    >>> family_spec("derl/GSM8K-v0").multi_turn
    False
    >>> family_spec("derl/GSM8K-v0").env("derl/GSM8K-v0").benchmark
    'gsm8k'

The spec holds only what the card declares, in plain data, because this module sits below
every stage that uses it (right after :mod:`derl_bench.cards`). What a family plugs into a later
stage its card names under ``hooks:``, as dotted ``module:attr`` paths that :meth:`FamilySpec.part`
resolves on first use, like ``entry_point`` and ``observers``. A hook the card leaves out takes
the default of the stage that uses it (this module, before them all, names none of them):

``prompt``
    the prompt of a family: for a multi-turn family the text of its agent prompt
    (:class:`~derl_bench.policies.prompts.AgentPromptText`), for a single-step one an object
    whose ``messages(problem)`` gives a problem's chat messages, default the math prompt
    (:data:`~derl_bench.policies.prompts.MATH_PROMPT`: reason step by step, box the answer);
``action_parser``
    ``text -> (command, format_valid)``, default: the ``<think>/<action>`` parser of a multi-turn
    family, the whole response of a single-step one;
``evaluation``
    the evaluation adapter class, default: the generic adapter that reads the card's
    ``levels:`` (:class:`~derl_bench.evaluation.families.LevelsAdapter`);
``rlvmr_prompt``
    RLVMR's prompt of a multi-turn family, for the ``rlvmr`` protocol;
``data``
    the family's datasets, a sequence of :class:`~derl_bench.data.sources.Dataset` that
    ``derl-bench data`` downloads and verifies (:func:`~derl_bench.data.sources.datasets`);
``commands``
    what a multi-turn family gives the command stack (a small model choosing among the
    admissible commands: :mod:`derl_bench.policies.commands`, ``derl-bench model agent-base``,
    ``inner_commands``), a :class:`~derl_bench.policies.command_model.CommandParts`: the state
    tracker a command policy reads and the command model's tokenizer; a family without one has
    no command policies;
``board``
    plain data, ``{title, success_rule}`` of the family's leaderboard; an id's own ``board:``
    entry overrides it for that id's board.

Importing those objects here would make this module import the later stages, which could then
not import the spec.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from derl_bench import cards
from derl_bench.cards import CardError, card_families, load_card

EPISODE_KINDS = ("single-step", "multi-turn")
DOMAINS = ("math", "agent")

Interval = tuple[float, float]

HOOKS = ("prompt", "action_parser", "evaluation", "rlvmr_prompt", "data", "commands")
"""The dotted-path hooks a card may name (``board`` is plain data)."""
DEFAULT_SUCCESS_RULE = "the env reports success"


class UnknownFamilyError(ValueError):
    """A name that is neither a card family nor one of their env ids."""


def resolve(path: str) -> Any:
    """The object a card's dotted ``module:attr`` path names (its module imported on first use).

    >>> resolve("derl_bench.family:resolve") is resolve
    True
    """
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def board_folder(env_id: str) -> str:
    """The board of an env id: the record's ``benchmark`` and its folder,
    ``leaderboards/<board folder>/``. The one rule: the id's name without its namespace and
    version, lower-cased (not the family's name: a family may define several ids, each with its
    own board)::

        >>> board_folder("derl/ALFWorld-v0"), board_folder("derl/ReasoningGym-v0")
        ('alfworld', 'reasoninggym')
        >>> board_folder("derl_bench:derl/DigitsHack-v0")
        'digitshack'
    """
    name = env_id.rsplit(":", 1)[-1].split("/", 1)[-1]
    return name.rsplit("-v", 1)[0].lower()


@dataclass(frozen=True)
class Board:
    """How a leaderboard names itself and states its success rule."""

    title: str
    success_rule: str = DEFAULT_SUCCESS_RULE

    @classmethod
    def from_card(cls, entry: Mapping[str, Any] | None, default: Board) -> Board:
        entry = entry or {}
        unknown = set(entry) - {"title", "success_rule"}
        if unknown:
            raise CardError(f"a board names unknown keys {sorted(unknown)}")
        return cls(str(entry.get("title", default.title)),
                   str(entry.get("success_rule", default.success_rule)))


@dataclass(frozen=True)
class EnvIdSpec:
    """One env id a card defines: the bare env class, its observers, its default kwargs and
    its leaderboard."""

    env_id: str
    entry_point: str
    observers: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    board: Board | None = None

    @property
    def benchmark(self) -> str:
        """The leaderboard a record of this id belongs to, and its board folder
        (:func:`board_folder`): ``derl/ALFWorld-v0`` -> ``alfworld``."""
        return board_folder(self.env_id)


@dataclass(frozen=True)
class FamilySpec:
    """What one env family is, as its card (``envs/<name>.md``) declares it.

    ``domain`` is the historical Meta-Reward domain the family trains in (``"math"`` or
    ``"agent"``); ``primitives`` maps each primitive name to its declared range, in the order the
    observers emit them, and ``aliases`` the ``g1..g4`` names. ``max_steps`` is the default step
    cap of an episode (1 for single-step families). ``hooks`` holds the dotted paths of the
    family's parts, the defaults of its episode kind filled in (see the module docstring);
    ``joins_domain`` says whether its primitives belong to its domain's historical primitive
    set (the card's ``joins_domain``, default false). The mappings are plain dicts so that a spec
    pickles into worker processes; treat them as read-only.
    """

    name: str
    card_version: int
    ids: Mapping[str, EnvIdSpec]
    multi_turn: bool
    domain: str
    primitives: Mapping[str, Interval]
    aliases: Mapping[str, str]
    success_primitive: str
    max_steps: int
    hooks: Mapping[str, str] = field(default_factory=dict)
    joins_domain: bool = False
    data_checksums: Mapping[str, str] = field(default_factory=dict)
    """The card's ``data_checksums``: checksums over a selection of the data root's files (an
    eval set's games), keyed ``<folder>:<selection>``, which the data catalogue holds beside
    its own."""

    def part(self, hook: str) -> Any:
        """The object the card's hook ``hook`` names (see the module docstring), imported on
        first use; a :class:`~derl_bench.cards.CardError` when the card names none."""
        if hook not in HOOKS:
            raise ValueError(f"{hook!r} is not a card hook; hooks: {', '.join(HOOKS)}")
        if hook not in self.hooks:
            raise CardError(f"card {self.name!r} names no {hook!r} hook")
        try:
            return resolve(self.hooks[hook])
        except (ImportError, AttributeError) as err:
            raise CardError(f"card {self.name!r}: hook {hook} = {self.hooks[hook]!r} does not "
                            f"resolve ({err})") from None

    def has_part(self, hook: str) -> bool:
        return hook in self.hooks

    def board(self, benchmark: str) -> Board:
        """The leaderboard of ``benchmark`` (the :attr:`EnvIdSpec.benchmark` of one of the ids)."""
        for entry in self.ids.values():
            if entry.benchmark == benchmark and entry.board is not None:
                return entry.board
        return Board(benchmark)

    @property
    def env_ids(self) -> tuple[str, ...]:
        return tuple(self.ids)

    def env(self, env_id: str) -> EnvIdSpec:
        """The card entry of ``env_id`` (a ``derl_bench:`` prefix is allowed)."""
        bare = env_id.rsplit(":", 1)[-1]
        if bare not in self.ids:
            raise UnknownFamilyError(f"{env_id!r} is not an env id of the {self.name!r} card")
        return self.ids[bare]

    @classmethod
    def from_card(cls, card: Mapping[str, Any]) -> FamilySpec:
        """Build the spec from a card's parsed front matter, checking what it declares."""
        name = str(card.get("family"))

        def need(key: str) -> Any:
            if key not in card:
                raise CardError(f"card {name!r} has no {key!r}")
            return card[key]

        episodes = need("episodes")
        if episodes not in EPISODE_KINDS:
            raise CardError(f"card {name!r}: episodes is {episodes!r}, not one of {EPISODE_KINDS}")
        domain = need("domain")
        if domain not in DOMAINS:
            raise CardError(f"card {name!r}: domain is {domain!r}, not one of {DOMAINS}")
        declared = card.get("primitives") or {}
        if isinstance(declared, Mapping):
            ranges = {str(n): (float(lo), float(hi)) for n, (lo, hi) in declared.items()}
        else:  # a plain list of names declares no ranges
            ranges = {str(n): (-math.inf, math.inf) for n in declared}
        success = str(need("success"))
        if success not in ranges:
            raise CardError(f"card {name!r}: success primitive {success!r} is not declared")
        multi_turn = episodes == "multi-turn"
        declared_hooks = dict(card.get("hooks") or {})
        family_board = declared_hooks.pop("board", None)
        unknown = set(declared_hooks) - set(HOOKS)
        if unknown:
            raise CardError(f"card {name!r}: unknown hooks {sorted(unknown)}; "
                            f"hooks: {', '.join(HOOKS)}, board")
        # a hook the card leaves out keeps the default of the stage that uses it, which this
        # module (a stage before all of them) does not name
        hooks = {k: str(v) for k, v in declared_hooks.items()}
        ids = {}
        for env_id, entry in (card.get("ids") or {}).items():
            bare = EnvIdSpec(str(env_id), str(entry["entry_point"]), str(entry["observers"]),
                             dict(entry.get("kwargs") or {}))
            default = Board.from_card(family_board, Board(bare.benchmark))
            board = Board.from_card(entry.get("board"), default)
            ids[str(env_id)] = EnvIdSpec(bare.env_id, bare.entry_point, bare.observers,
                                         bare.kwargs, board)
        return cls(
            name=name, card_version=int(need("card_version")), ids=ids,
            multi_turn=multi_turn, domain=str(domain), primitives=ranges,
            aliases={str(k): str(v) for k, v in (card.get("aliases") or {}).items()},
            success_primitive=success,
            max_steps=int(need("max_steps")) if multi_turn else 1,
            hooks=hooks, joins_domain=bool(card.get("joins_domain", False)),
            data_checksums={str(k): str(v)
                            for k, v in (card.get("data_checksums") or {}).items()},
        )


@functools.cache
def family_specs() -> dict[str, FamilySpec]:
    """Every card family's spec, by family name."""
    return {family: FamilySpec.from_card(load_card(family)) for family in card_families()}


@functools.cache
def _id_index() -> dict[str, FamilySpec]:
    return {env_id: spec for spec in family_specs().values() for env_id in spec.ids}


@functools.cache
def _benchmark_index() -> dict[str, FamilySpec]:
    return {e.benchmark: spec for spec in family_specs().values() for e in spec.ids.values()}


_RELOADERS: list[Callable[[], None]] = []


def on_reload(action: Callable[[], None]) -> Callable[[], None]:
    """Run ``action`` on every :func:`reload` (a later stage's cache of what the cards say)."""
    _RELOADERS.append(action)
    return action


def reload() -> None:
    """Search the card folders again and forget everything read from the cards: the specs, and
    every cache that a stage registered with :func:`on_reload` (the registration with
    Gymnasium among them). Call it after changing ``DERL_BENCH_CARD_PATH`` in a running
    process."""
    for cache in (cards.card_paths, cards.load_card, family_specs, _id_index, _benchmark_index,
                  _resolved):
        cache.cache_clear()
    for action in _RELOADERS:
        action()


def family_spec(name: str | FamilySpec) -> FamilySpec:
    """The spec of a card family, given its name (``"alfworld"``), one of its env ids or the
    leaderboard name of one (``"gsm8k"``).

    An env id may carry a ``derl_bench:`` prefix, and may be an id registered with Gymnasium
    as a variant of a card's id (reusing its entry point and ``env_class``) or of a card's
    bare env class.

    >>> family_spec("derl/MATH-v0").name
    'math'
    """
    if isinstance(name, FamilySpec):
        return name
    specs = family_specs()
    if name in specs:
        return specs[name]
    if name in _benchmark_index():
        return _benchmark_index()[name]
    bare = name.rsplit(":", 1)[-1]
    index = _id_index()
    if bare in index:
        return index[bare]
    variant = _registered_variant(bare)
    if variant is not None:
        return variant
    raise UnknownFamilyError(
        f"{name!r} is not a derl-bench env id or family (families: {', '.join(specs)})")


@dataclass(frozen=True)
class Family:
    """A family resolved once, where a command starts, and handed down: its spec and the parts
    its card names, each imported and looked up here rather than by every stage that uses it.

    ``prompt``, ``action_parser``, ``rlvmr_prompt`` and ``commands`` are ``None`` where the
    card names none (the stage that uses one supplies its default: the math prompt
    :func:`~derl_bench.policies.prompts.problem_prompt`, the episode kind's parser
    :func:`~derl_bench.observers.think_action.action_parser_for`); ``verl_agent_projection``
    is the card's block of that name (``{}`` when absent); ``card`` is the card's whole front
    matter, read once, for a stage that reads a block the spec does not type (``levels``,
    ``proxy``, ``planted_reward``, ...); ``adapters`` keeps the evaluation rules the evaluation
    stage made for each id (:func:`~derl_bench.evaluation.families.resolve_adapter`). The
    parts are module-level objects, so a family pickles into worker processes by reference.

    >>> family = resolve_family("derl/ALFWorld-v0")
    >>> family.spec.name, family.multi_turn, family.commands is not None
    ('alfworld', True, True)
    >>> resolve_family("derl/GSM8K-v0").prompt is None  # the math card keeps the default
    True
    """

    spec: FamilySpec
    action_parser: Callable[[str], tuple[str, bool]] | None = None
    prompt: Any = None
    rlvmr_prompt: Any = None
    commands: Any = None
    verl_agent_projection: Mapping[str, Any] = field(default_factory=dict)
    card: Mapping[str, Any] = field(default_factory=dict)
    adapters: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def multi_turn(self) -> bool:
        return self.spec.multi_turn

    @classmethod
    def resolve(cls, spec: FamilySpec) -> Family:
        """Import every part ``spec``'s card names (a :class:`CardError` names a broken one)."""
        def optional(hook: str) -> Any:
            return spec.part(hook) if spec.has_part(hook) else None

        card = load_card(spec.name)
        return cls(spec=spec, action_parser=optional("action_parser"),
                   prompt=optional("prompt"), rlvmr_prompt=optional("rlvmr_prompt"),
                   commands=optional("commands"),
                   verl_agent_projection=dict(card.get("verl_agent_projection") or {}),
                   card=card)


@functools.cache
def _resolved(name: str) -> Family:
    return Family.resolve(family_specs()[name])


def resolve_family(name: str | FamilySpec | Family) -> Family:
    """The :class:`Family` of ``name`` (anything :func:`family_spec` takes), its parts resolved
    once per process and kept until :func:`reload`."""
    if isinstance(name, Family):
        return name
    spec = family_spec(name)
    # a spec built from a card outside the search path (a test's) is resolved on its own
    return _resolved(spec.name) if family_specs().get(spec.name) is spec else Family.resolve(spec)


def find_family(env_id: str) -> Family | None:
    """The :class:`Family` of ``env_id``, or ``None`` for an env id no card defines (a user's
    own env, which the checks that read a card skip)."""
    try:
        return resolve_family(env_id)
    except UnknownFamilyError:
        return None


def card_for(name: str | FamilySpec) -> dict[str, Any]:
    """The whole card (its front matter) of the family :func:`family_spec` finds for ``name``,
    for a stage that reads a block the spec does not type (``base_policy``, ``proxy``, ...).

    >>> card_for("derl/Arithmetic-v0")["family"]
    'arithmetic'
    """
    return load_card(family_spec(name).name)


def _registered_variant(env_id: str) -> FamilySpec | None:
    import gymnasium as gym

    registered = gym.registry.get(env_id)
    if registered is None:
        return None
    # a card id registers its bare class as the ``env_class`` argument of a shared entry
    # point; a user's variant may reuse that registration or name the bare class directly
    entry = registered.kwargs.get("env_class", registered.entry_point)
    for spec in family_specs().values():
        if any(e.entry_point == entry for e in spec.ids.values()):
            return spec
    return None
