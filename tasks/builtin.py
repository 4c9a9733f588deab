"""The built-in offline task set and its fact corpus (no network, no model hub, no randomness).

:func:`builtin_corpus` is an "archive" of passages: a FICTIONAL part (kingdoms, cities, inventors
with founding years, populations, birth years and inventions; names built from syllables, so a
model cannot know the answers without searching) plus a short REAL part (well-known historical
events by year, e.g. 144 AD: Marcion of Sinope excommunicated by the church of Rome), so that the
seed question "Calculate 12 squared, and then find a major historical event in that year" has an
answer in the corpus.

:func:`builtin_tasks` derives >= 200 tasks with ground truth from it, in four kinds:

- ``arithmetic``: needs the calculator ("What is 347 * 29?");
- ``lookup``: one search in the archive ("In which year was the Kingdom of Valdoria founded?");
- ``two_step``: compute a number, then look up the fact keyed by it, or look up a number and then
  compute with it;
- ``history``: compute a year, then find the real event of that year.

Everything is a pure function of constants: values come from sha256 of fixed keys (no
``random``), so the set and every ``metadata["row_id"]`` are identical across runs, machines and
Python versions. Fictional years and populations are unique across the whole corpus, so each
question has exactly one right answer.

This module is part of the light producer SDK: standard library only (no torch/faust/transformers).
:mod:`.builtin_wide` adds a wider arithmetic pool to the training split (``builtin:train-wide``).
What is not covered: paraphrased questions, multilingual tasks, answers that need reasoning beyond
one or two tool calls.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TypeVar

from streamgrpo.tasks.datasets import TaskRow

T = TypeVar("T")
SOURCE = "builtin"
N_KINGDOMS = 60
N_INVENTORS = 50
N_ARITHMETIC = 80

_ONSETS = ("Val", "Kor", "Mir", "Thal", "Bren", "Ost", "Cal", "Dun", "Eld", "Fen", "Gal", "Hal", "Isk", "Jor",
           "Lum", "Mor", "Nor", "Pel", "Quar", "Ros", "Sar", "Tor", "Ul", "Vey", "Wyn", "Zar")
_MIDDLES = ("a", "e", "i", "o", "u", "ae", "io")
_CODAS = ("doria", "mark", "wyn", "heim", "lund", "gard", "vel", "stead", "mere", "fell", "holt", "rath")
_TOWN_END = ("port", "ford", "bridge", "haven", "burg", "field", "crest", "moor", "wick", "ton")
_GIVEN = ("Ada", "Bram", "Cora", "Dario", "Elin", "Faro", "Greta", "Hugo", "Ines", "Jasper", "Kira", "Lev",
          "Mara", "Nils", "Orla", "Pavel", "Rhea", "Soren", "Tova", "Ulric", "Vera", "Wim", "Yara", "Zeno")
_ADJ = ("brass", "copper", "glass", "clockwork", "steam", "crystal", "silver", "iron", "tidal", "lunar")
_DEVICE = ("hygrometer", "loom", "compass", "lantern", "astrolabe", "pump", "telescope", "kiln", "press",
           "sextant", "metronome", "barometer")

#: Real events (year AD, text, the key phrase a correct answer contains). Only well-established facts.
HISTORY: tuple[tuple[int, str, str], ...] = (
    (64, "The Great Fire of Rome burned for six days during the reign of the emperor Nero.",
     "Great Fire of Rome"),
    (79, "Mount Vesuvius erupted and buried the Roman towns of Pompeii and Herculaneum.",
     "Vesuvius"),
    (80, "The Colosseum (Flavian Amphitheatre) in Rome was inaugurated by the emperor Titus.",
     "Colosseum"),
    (81, "The emperor Titus died and his brother Domitian became Roman emperor.",
     "Domitian"),
    (117, "The emperor Trajan died and Hadrian became Roman emperor; the empire was at its greatest extent.",
     "Hadrian"),
    (121, "Marcus Aurelius, later Roman emperor and Stoic philosopher, was born in Rome.",
     "Marcus Aurelius"),
    (122, "Construction of Hadrian's Wall in northern Britain began.",
     "Hadrian's Wall"),
    (144, "Marcion of Sinope was excommunicated by the church of Rome and founded his own church, Marcionism.",
     "Marcion"),
    (169, "The co-emperor Lucius Verus died, leaving Marcus Aurelius as sole Roman emperor.",
     "Lucius Verus"),
    (180, "Marcus Aurelius died and his son Commodus became sole Roman emperor.",
     "Commodus"),
    (212, "The emperor Caracalla's Constitutio Antoniniana granted Roman citizenship to all free men of the empire.",
     "Constitutio Antoniniana"),
    (313, "The Edict of Milan granted religious toleration to Christians in the Roman Empire.",
     "Edict of Milan"),
    (325, "The First Council of Nicaea was convened by the emperor Constantine.",
     "Council of Nicaea"),
    (330, "Constantinople was dedicated as the new capital of the Roman Empire.",
     "Constantinople"),
    (410, "Rome was sacked by the Visigoths under Alaric.",
     "Alaric"),
    (476, "Odoacer deposed Romulus Augustulus, ending the Western Roman Empire.",
     "Odoacer"),
    (622, "Muhammad migrated from Mecca to Medina (the Hijra), year one of the Islamic calendar.",
     "Hijra"),
    (800, "Charlemagne was crowned Emperor of the Romans by Pope Leo III on Christmas Day.",
     "Charlemagne"),
    (1054, "The East-West Schism divided the Catholic and Eastern Orthodox churches.",
     "Schism"),
    (1066, "William the Conqueror won the Battle of Hastings and the Norman conquest of England began.",
     "Hastings"),
    (1096, "The First Crusade began.",
     "First Crusade"),
    (1215, "King John of England sealed Magna Carta at Runnymede.",
     "Magna Carta"),
    (1453, "Constantinople fell to the Ottoman Empire under Mehmed II.",
     "Constantinople"),
    (1492, "Christopher Columbus reached the Americas.",
     "Columbus"),
    (1517, "Martin Luther published his Ninety-five Theses, starting the Protestant Reformation.",
     "Ninety-five Theses"),
    (1521, "The Aztec capital Tenochtitlan fell to Hernan Cortes and his allies.",
     "Tenochtitlan"),
    (1588, "The Spanish Armada was defeated by the English fleet.",
     "Armada"),
    (1600, "Tokugawa Ieyasu won the Battle of Sekigahara in Japan.",
     "Sekigahara"),
    (1610, "Galileo Galilei published Sidereus Nuncius, his telescope observations.",
     "Sidereus Nuncius"),
    (1620, "The Mayflower carried the Pilgrims to Plymouth in North America.",
     "Mayflower"),
    (1648, "The Peace of Westphalia ended the Thirty Years' War.",
     "Peace of Westphalia"),
    (1666, "The Great Fire of London destroyed much of the city.",
     "Great Fire of London"),
    (1687, "Isaac Newton published the Principia Mathematica.",
     "Principia"),
    (1707, "The Acts of Union joined England and Scotland into the Kingdom of Great Britain.",
     "Acts of Union"),
    (1776, "The United States Declaration of Independence was adopted.",
     "Declaration of Independence"),
    (1789, "The storming of the Bastille began the French Revolution.",
     "Bastille"),
    (1815, "Napoleon was defeated at the Battle of Waterloo.",
     "Waterloo"),
    (1859, "Charles Darwin published On the Origin of Species.",
     "Origin of Species"),
    (1861, "The American Civil War began.",
     "American Civil War"),
    (1869, "The Suez Canal was opened.",
     "Suez Canal"),
    (1871, "The German Empire was proclaimed at Versailles.",
     "German Empire"),
    (1903, "The Wright brothers made the first powered aeroplane flight.",
     "Wright brothers"),
    (1912, "The RMS Titanic sank on its maiden voyage.",
     "Titanic"),
    (1914, "The First World War began.",
     "First World War"),
    (1929, "The Wall Street Crash began the Great Depression.",
     "Wall Street Crash"),
    (1945, "The Second World War ended.",
     "Second World War"),
    (1957, "The Soviet Union launched Sputnik 1, the first artificial satellite.",
     "Sputnik"),
    (1961, "Yuri Gagarin became the first human in space.",
     "Gagarin"),
    (1969, "Apollo 11 landed the first humans on the Moon.",
     "Apollo 11"),
    (1989, "The Berlin Wall fell.",
     "Berlin Wall"),
    (1990, "Germany was reunified.",
     "Germany"),
    (1991, "The Soviet Union was dissolved.",
     "Soviet Union"),
)



@dataclass(frozen=True)
class Passage:
    """One passage of a searchable corpus."""

    id: str
    title: str
    text: str


@dataclass(frozen=True)
class _Kingdom:
    name: str
    year: int
    founder: str
    capital: str
    population: int


@dataclass(frozen=True)
class _Inventor:
    name: str
    year: int
    invention: str
    town: str


def _h(*key: object) -> int:
    """Deterministic 64-bit value of ``key`` (sha256; identical on every run and platform)."""
    return int.from_bytes(hashlib.sha256("|".join(map(str, key)).encode()).digest()[:8], "big")


def _pick(seq: tuple[str, ...], *key: object) -> str:
    return seq[_h(*key) % len(seq)]


def _unique(make: Callable[[str, int], T], kind: str, used: set[object], n: int) -> list[T]:
    """The first ``n`` values of ``make(kind, 0), make(kind, 1), ...`` not already in ``used``."""
    out: list[T] = []
    i = 0
    while len(out) < n:
        value = make(kind, i)
        i += 1
        if value not in used:
            used.add(value)
            out.append(value)
    return out


def _place(kind: str, i: int) -> str:
    return _pick(_ONSETS, kind, i, 0) + _pick(_MIDDLES, kind, i, 1) + _pick(_CODAS, kind, i, 2)


def _town(kind: str, i: int) -> str:
    return _pick(_ONSETS, kind, i, 0) + _pick(_MIDDLES, kind, i, 1) + _pick(_TOWN_END, kind, i, 2)


def _person(kind: str, i: int) -> str:
    return _pick(_GIVEN, kind, i, 0) + " " + _place(kind + "-surname", i)


def _year(kind: str, i: int) -> int:
    return 1000 + _h(kind, "year", i) % 2000


def _population(kind: str, i: int) -> int:
    return 10_000 + _h(kind, "pop", i) % 990_000


def _invention(kind: str, i: int) -> str:
    return f"{_pick(_ADJ, kind, i, 0)} {_pick(_DEVICE, kind, i, 1)}"


@lru_cache(maxsize=1)
def _world() -> tuple[tuple[_Kingdom, ...], tuple[_Inventor, ...]]:
    names: set[object] = set()
    years: set[object] = {year for year, _, _ in HISTORY}  # fictional years never collide with real ones
    kingdoms = _unique(_place, "kingdom", names, N_KINGDOMS)
    capitals = _unique(_town, "capital", names, N_KINGDOMS)
    founders = _unique(_person, "founder", names, N_KINGDOMS)
    k_years = _unique(_year, "kingdom", years, N_KINGDOMS)
    pops = _unique(_population, "capital", set(), N_KINGDOMS)
    inventors = _unique(_person, "inventor", names, N_INVENTORS)
    inventions = _unique(_invention, "invention", set(), N_INVENTORS)
    towns = _unique(_town, "birthplace", names, N_INVENTORS)
    i_years = _unique(_year, "inventor", years, N_INVENTORS)
    ks = tuple(_Kingdom(*v) for v in zip(kingdoms, k_years, founders, capitals, pops, strict=True))
    inv = tuple(_Inventor(*v) for v in zip(inventors, i_years, inventions, towns, strict=True))
    return ks, inv


def builtin_corpus() -> list[Passage]:
    """The archive: fictional kingdoms and inventors, then real historical events by year."""
    kingdoms, inventors = _world()
    out = [
        Passage(f"kingdom-{i:03d}", f"Kingdom of {k.name}",
                f"The Kingdom of {k.name} was founded in the year {k.year} by {k.founder}. "
                f"Its capital is {k.capital}, a city with a population of {k.population}.")
        for i, k in enumerate(kingdoms)
    ]
    out += [
        Passage(f"inventor-{i:03d}", p.name,
                f"{p.name} was born in {p.town} in the year {p.year} and invented the {p.invention}.")
        for i, p in enumerate(inventors)
    ]
    out += [Passage(f"history-{year:04d}", f"Events of the year {year} AD", f"In the year {year} AD: {text}")
            for year, text, _ in HISTORY]
    return out


def _row(kind: str, i: int, question: str, answers: list[str], difficulty: str, **extra: str) -> TaskRow:
    meta = {"kind": kind, "difficulty": difficulty, "row_id": f"builtin-{kind}-{i:04d}", **extra}
    return TaskRow(question=question, ground_truths=answers, source=SOURCE, metadata=meta)


def _express(n: int, *key: object) -> str:
    """An arithmetic instruction whose result is ``n`` (a square when possible, else a product or sum)."""
    root = round(n**0.5)
    if root * root == n:
        return f"Compute {root} squared."
    factors = [a for a in range(11, 100) if n % a == 0 and 11 <= n // a <= 999]
    if factors:
        a = factors[_h(*key, "f") % len(factors)]
        return f"Compute {a} * {n // a}."
    a = 100 + _h(*key, "s") % max(1, n - 200) if n > 300 else n // 2
    return f"Compute {a} + {n - a}."


#: The training split's arithmetic operations: (difficulty, (a, b, c) -> (question, answer)), written in symbols.
#: ``bench/bench_transfer.py`` applies them to operands no train task uses.
ARITHMETIC_TEMPLATES: tuple[tuple[str, Callable[[int, int, int], tuple[str, int]]], ...] = (
    ("easy", lambda a, b, c: (f"What is {a} * {b}?", a * b)),
    ("easy", lambda a, b, c: (f"What is {a * 37 + b} + {c * 113}?", a * 37 + b + c * 113)),
    ("medium", lambda a, b, c: (f"What is {a} * {b} - {c}?", a * b - c)),
    ("medium", lambda a, b, c: (f"What is {b} squared plus {c}?", b * b + c)),
    ("hard", lambda a, b, c: (f"What is ({a} + {c}) * ({b} - 7)?", (a + c) * (b - 7))),
    ("hard", lambda a, b, c: (f"What is the integer part of {a * b * 10 + c} divided by {b}?",
                              (a * b * 10 + c) // b)),
)

#: The same six operations in words, for the training split only: ``ARITHMETIC_WORDINGS[k]`` asks for the number
#: ``ARITHMETIC_TEMPLATES[k]`` asks for and writes the same numbers, so the split's number set (and with it the
#: held-out split, whose operands avoid it) does not depend on the wording. None shares a sentence frame or its
#: first two words with a held-out phrasing (``tests/unit/tasks/test_builtin_split.py``): the planner practises
#: turning words into an expression, and the held-out split still measures that skill on wordings it never saw.
ARITHMETIC_WORDINGS: tuple[tuple[Callable[[int, int, int], str], ...], ...] = (
    (lambda a, b, c: f"Find the product of {a} and {b}.",
     lambda a, b, c: f"What do {a} groups of {b} come to in total?"),
    (lambda a, b, c: f"What is the total of {a * 37 + b} and {c * 113}?",
     lambda a, b, c: f"A shop sold {a * 37 + b} items on Monday and {c * 113} on Tuesday. How many in all?"),
    (lambda a, b, c: f"Take {a} times {b} and then remove {c}. What remains?",
     lambda a, b, c: f"There are {a} boxes of {b} pens; {c} pens are given away. How many pens are left?"),
    (lambda a, b, c: f"Find the square of {b}, increased by {c}.",
     lambda a, b, c: f"What number is {c} more than {b} times itself?"),
    (lambda a, b, c: f"Find the sum of {a} and {c}, times the difference between {b} and 7.",
     lambda a, b, c: f"Increase {a} by {c} and decrease {b} by 7; what is the product of the two results?"),
    (lambda a, b, c: f"How many whole times does {b} go into {a * b * 10 + c}?",
     lambda a, b, c: f"If {a * b * 10 + c} apples are shared equally among {b} baskets, how many whole apples "
                     "does each basket get?"),
)


def _arithmetic_question(i: int, a: int, b: int, c: int) -> tuple[str, str, int]:
    """Row ``i``'s (difficulty, question, answer): operation ``i % 6``; of each round of six rows, one round in
    three is asked in symbols and the other two in the operation's two wordings."""
    k = i % len(ARITHMETIC_TEMPLATES)
    difficulty, make = ARITHMETIC_TEMPLATES[k]
    question, answer = make(a, b, c)
    rnd = i // len(ARITHMETIC_TEMPLATES)
    if rnd % 3:
        question = ARITHMETIC_WORDINGS[k][rnd % 3 - 1](a, b, c)
    return difficulty, question, answer


def arithmetic_operands(i: int) -> tuple[int, int, int]:
    """The operands (a, b, c) of arithmetic row ``i``; its operation is ``ARITHMETIC_TEMPLATES[i % 6]``."""
    return 101 + _h("ar", i, "a") % 899, 12 + _h("ar", i, "b") % 88, 10 + _h("ar", i, "c") % 990


def _arithmetic() -> list[TaskRow]:
    rows: list[TaskRow] = []
    for i in range(N_ARITHMETIC):
        a, b, c = arithmetic_operands(i)
        difficulty, question, answer = _arithmetic_question(i, a, b, c)
        rows.append(_row("arithmetic", i, question, [str(answer)], difficulty))
    return rows


def _lookups() -> list[TaskRow]:
    kingdoms, inventors = _world()
    rows: list[TaskRow] = []
    for i, k in enumerate(kingdoms):
        if i % 3 == 0:
            q, a = f"According to the archive, in which year was the Kingdom of {k.name} founded?", str(k.year)
        elif i % 3 == 1:
            q, a = f"According to the archive, what is the capital of the Kingdom of {k.name}?", k.capital
        else:
            q, a = f"According to the archive, who founded the Kingdom of {k.name}?", k.founder
        rows.append(_row("lookup", len(rows), q, [a], "easy"))
    for p in inventors:
        if len(rows) % 2:
            q, a = f"According to the archive, who invented the {p.invention}?", p.name
        else:
            q, a = f"According to the archive, in which town was {p.name} born?", p.town
        rows.append(_row("lookup", len(rows), q, [a], "easy"))
    return rows


def _two_step() -> list[TaskRow]:
    kingdoms, inventors = _world()
    rows: list[TaskRow] = []
    for i, k in enumerate(kingdoms):
        if i % 2 == 0:
            q = f"{_express(k.year, 'k', i)} Which kingdom was founded in that year according to the archive?"
            rows.append(_row("two_step", len(rows), q, [k.name], "medium"))
        else:
            add = 10 + _h("add", i) % 90
            q = (f"Look up the population of {k.capital}, the capital of the Kingdom of {k.name}, "
                 f"and add {add} to it. What is the result?")
            rows.append(_row("two_step", len(rows), q, [str(k.population + add)], "hard"))
    for i, p in enumerate(inventors):
        q = f"{_express(p.year, 'i', i)} Which inventor was born in that year according to the archive?"
        rows.append(_row("two_step", len(rows), q, [p.name], "medium"))
    return rows


def _history() -> list[TaskRow]:
    rows = [_row("history", 0, "Calculate 12 squared, and then find a major historical event in that year.",
                 ["Marcion"], "medium", year="144")]
    for year, _, answer in HISTORY:
        q = f"{_express(year, 'h', year)} What major historical event happened in that year (AD)?"
        rows.append(_row("history", len(rows), q, [answer], "medium", year=str(year)))
    return rows


@lru_cache(maxsize=1)
def _all_tasks() -> tuple[TaskRow, ...]:
    return tuple(_arithmetic() + _lookups() + _two_step() + _history())


# -- the train / held-out split -------------------------------------------------------------------
#
# Rule (tested by tests/unit/tasks/test_builtin_split.py):
# 1. ENTITIES: every HELDOUT_EVERY-th kingdom, inventor and historical year (index % HELDOUT_EVERY ==
#    HELDOUT_EVERY - 1) belongs to the held-out split only: no train task names it or has it as
#    its answer.
# 2. NUMBERS: no integer written in a held-out task (question or answer) appears in any train task.
#    Held-out tasks are drawn from a deterministic candidate stream and a candidate that would
#    reuse a train number is skipped.
# 3. TEMPLATES: held-out arithmetic uses phrasings that never occur in train, and every held-out
#    lookup / two-step / history task is about a held-out entity, so no (template, answer) pair is
#    shared. What transfers from training is the skill (which tool, what input, answering from the
#    observation), not an answer.
# The corpus keeps every passage: it is the tools' world, not training data.
# ``builtin:train-wide`` (:mod:`.builtin_wide`) adds arithmetic tasks to the training split WITHOUT moving the
# held-out split: nothing below reads them; they obey rules 2 and 3 from the training side (an extra task skips
# every number a held-out task writes, and its wordings avoid the held-out phrasings).

HELDOUT_EVERY = 5
N_HELDOUT_ARITHMETIC = 40


def _is_heldout_entity(index: int) -> bool:
    return index % HELDOUT_EVERY == HELDOUT_EVERY - 1


def _numbers(row: TaskRow) -> set[int]:
    return {int(n) for n in re.findall(r"\d+", " ".join([row.question, *row.ground_truths]))}


@lru_cache(maxsize=1)
def _heldout_names() -> frozenset[str]:
    kingdoms, inventors = _world()
    names = {k.name for i, k in enumerate(kingdoms) if _is_heldout_entity(i)}
    names |= {p.name for i, p in enumerate(inventors) if _is_heldout_entity(i)}
    names |= {str(year) for i, (year, _, _) in enumerate(HISTORY) if _is_heldout_entity(i)}
    return frozenset(names)


def _mentions_heldout(row: TaskRow) -> bool:
    text = " ".join([row.question, *row.ground_truths])
    return any(re.search(rf"\b{re.escape(name)}\b", text) for name in _heldout_names())


def _entity_of(row: TaskRow) -> str | None:
    """The held-out kingdom / inventor / year a task is about, or None."""
    for name in sorted(_heldout_names()):
        text = " ".join([row.question, *row.ground_truths, row.metadata.get("year", "")])
        if re.search(rf"\b{re.escape(name)}\b", text):
            return name
    return None


@lru_cache(maxsize=1)
def _train_tasks() -> tuple[TaskRow, ...]:
    return tuple(r for r in _all_tasks() if _entity_of(r) is None and r.metadata.get("year", "") not in _heldout_names())


@lru_cache(maxsize=1)
def _train_numbers() -> frozenset[int]:
    return frozenset(n for r in _train_tasks() for n in _numbers(r))


#: held-out arithmetic phrasings (never used by the train split): (difficulty, question, answer)
_HELDOUT_ARITHMETIC: tuple[tuple[str, Callable[[int, int, int], tuple[str, int]]], ...] = (
    ("easy", lambda a, b, c: (f"Multiply {a} by {b}.", a * b)),
    ("easy", lambda a, b, c: (f"Calculate the sum of {a} and {c}.", a + c)),
    ("medium", lambda a, b, c: (f"Subtract {c} from the product of {a} and {b}. What do you get?", a * b - c)),
    ("medium", lambda a, b, c: (f"How much is {b} times {b}, plus {a}?", b * b + a)),
    ("hard", lambda a, b, c: (f"Add {a} and {c}, then multiply the total by {b}. What is the result?",
                              (a + c) * b)),
)


def _heldout_arithmetic() -> list[TaskRow]:
    """Operands are drawn from the numbers no train task uses; a candidate whose answer is a train number
    is skipped."""
    taken = _train_numbers()
    small = [n for n in range(12, 100) if n not in taken]
    large = [n for n in range(101, 1000) if n not in taken]
    rows: list[TaskRow] = []
    i = 0
    while len(rows) < N_HELDOUT_ARITHMETIC:
        a, b, c = (large[_h("ho", i, "a") % len(large)], small[_h("ho", i, "b") % len(small)],
                   large[_h("ho", i, "c") % len(large)])
        i += 1
        difficulty, make = _HELDOUT_ARITHMETIC[len(rows) % len(_HELDOUT_ARITHMETIC)]
        question, answer = make(a, b, c)
        row = _row("arithmetic", len(rows), question, [str(answer)], difficulty, split="heldout")
        if _numbers(row) & taken:
            continue
        rows.append(replace(row, metadata={**row.metadata, "row_id": f"heldout-arithmetic-{len(rows):04d}"}))
    return rows


def _fresh_sum(n: int, *key: object) -> str | None:
    """``Compute a + b.`` with ``a + b == n`` and neither a nor b a train number (None if impossible)."""
    taken = _train_numbers()
    for attempt in range(200):
        a = 100 + _h(*key, "fresh", attempt) % max(1, n - 200) if n > 300 else n // 2 + attempt
        b = n - a
        if b > 0 and a not in taken and b not in taken:
            return f"Compute {a} + {b}."
    return None


def _heldout_entity_tasks() -> list[TaskRow]:
    """Lookups, two-step and history tasks about the held-out entities, with fresh numbers only."""
    kingdoms, inventors = _world()
    rows: list[TaskRow] = []
    lookups = [r for r in _lookups() if _entity_of(r) is not None]
    rows += [replace(r, metadata={**r.metadata, "split": "heldout"}) for r in lookups]
    for i, k in enumerate(kingdoms):
        if not _is_heldout_entity(i):
            continue
        if (i // HELDOUT_EVERY) % 2 == 0 and (expr := _fresh_sum(k.year, "hk", i)):
            q = f"{expr} Which kingdom was founded in that year according to the archive?"
            rows.append(_row("two_step", i, q, [k.name], "medium", split="heldout"))
        else:
            add = next(a for a in range(100, 1000) if a not in _train_numbers()
                       and k.population + a not in _train_numbers() and _h("hadd", i, a) % 7 == 0)
            q = (f"Look up the population of {k.capital}, the capital of the Kingdom of {k.name}, "
                 f"and add {add} to it. What is the result?")
            rows.append(_row("two_step", i, q, [str(k.population + add)], "hard", split="heldout"))
    for i, p in enumerate(inventors):
        if _is_heldout_entity(i) and (expr := _fresh_sum(p.year, "hi", i)):
            q = f"{expr} Which inventor was born in that year according to the archive?"
            rows.append(_row("two_step", 100 + i, q, [p.name], "medium", split="heldout"))
    for i, (year, _, answer) in enumerate(HISTORY):
        if _is_heldout_entity(i) and (expr := _fresh_sum(year, "hh", year)):
            q = f"{expr} What major historical event happened in that year (AD)?"
            rows.append(_row("history", i, q, [answer], "medium", split="heldout", year=str(year)))
    return [replace(r, metadata={**r.metadata, "row_id": r.metadata["row_id"].replace("builtin-", "heldout-")})
            for r in rows if not _numbers(r) & _train_numbers()]


@lru_cache(maxsize=1)
def _heldout_tasks() -> tuple[TaskRow, ...]:
    """Held-out arithmetic (new phrasings, new numbers) + tasks about the held-out entities (new numbers),
    interleaved kind by kind, so that the first N of them (the evaluator's fixed sample) mix every kind."""
    return _interleave(_heldout_arithmetic() + _heldout_entity_tasks())


def _interleave(rows: Sequence[TaskRow]) -> tuple[TaskRow, ...]:
    """``rows`` reordered kind by kind (one of each kind in turn, each kind's own order kept), so that any
    prefix mixes every kind."""
    by_kind: dict[str, list[TaskRow]] = {}
    for row in rows:
        by_kind.setdefault(row.metadata["kind"], []).append(row)
    order: list[TaskRow] = []
    while any(by_kind.values()):
        for queue in by_kind.values():
            if queue:
                order.append(queue.pop(0))
    return tuple(order)


def builtin_tasks() -> list[TaskRow]:
    """All built-in TRAIN-pool tasks plus the held-out split (fixed order); fresh copies.

    ``streamgrpo run`` submits :func:`train_tasks` only; ``streamgrpo eval`` uses :func:`heldout_tasks`.
    """
    return _copies(_train_tasks() + _heldout_tasks())


def train_tasks() -> list[TaskRow]:
    """The training split (see the split rule above), interleaved kind by kind so that a run that reaches only
    part of it trains on every kind, not on arithmetic first and lookups after; fresh copies."""
    return _copies(_interleave(tuple(replace(r, metadata={**r.metadata, "split": "train"}) for r in _train_tasks())))


def heldout_tasks() -> list[TaskRow]:
    """The held-out split: never trained on by ``streamgrpo run``; fresh copies."""
    return _copies(_heldout_tasks())


def _copies(rows: tuple[TaskRow, ...]) -> list[TaskRow]:
    return [replace(r, ground_truths=list(r.ground_truths), metadata=dict(r.metadata)) for r in rows]
