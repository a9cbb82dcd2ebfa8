"""Seeded content: people, companies, amounts, dates and message ids for scenarios.

``Gen(seed, scenario)`` draws everything from one ``random.Random`` seeded by (scenario,
seed), so an instance is a pure function of its seed, and two seeds give two different casts,
calendars and numbers with the same structure.
"""

from __future__ import annotations

import hashlib
import random
from datetime import UTC, datetime, time, timedelta
from typing import Any, TypeVar

from services.tools.events.spec import Person

T = TypeVar("T")

FIRST = (
    "Ada Alan Amara Ben Bianca Carlos Chen Dana Diego Elena Emeka Farah Felix Grace Hana "
    "Hugo Ines Ivan Jade Jonas Kai Keiko Lars Leila Liam Mara Marco Maya Nadia Nikhil "
    "Noor Olga Omar Priya Quinn Rafael Rosa Sami Sofia Tariq Tomas Uma Vera Victor Wen "
    "Yara Yusuf Zane Zoe"
).split()
LAST = (
    "Abbott Alvarez Bauer Becker Castillo Chowdhury Costa Dubois Eriksen Fischer Fonseca "
    "Garcia Haddad Hansen Ito Jansen Kaur Kim Kowalski Larsen Lindqvist Mendes Moreau "
    "Nakamura Novak Okafor Olsen Park Patel Petrov Quinn Ramos Rossi Sato Schmidt Silva "
    "Singh Sorensen Tanaka Torres Varga Vogel Wagner Weber Yamamoto Zhang"
).split()
COMPANIES = (
    "Acme Northwind Globex Initech Umbrella Stark Wayne Tyrell Cyberdyne Hooli "
    "Vandelay Soylent Oscorp Wonka Gringotts Aperture Massive Dynamic"
).split()
CITIES = (
    "Lisbon Berlin Toronto Singapore Nairobi Oslo Madrid Seoul Austin Dublin Prague Melbourne"
).split()


class Gen:
    def __init__(self, seed: int, scenario: str) -> None:
        digest = hashlib.sha256(f"{scenario}:{seed}".encode()).digest()
        self.rng = random.Random(int.from_bytes(digest[:8], "big"))
        self.seed = seed
        self.scenario = scenario
        self._used_names: set[str] = set()
        self._n = 0
        self.company = self.pick(COMPANIES)
        self.domain = f"{self.company.lower()}.test"

    def pick(self, items: list[T] | tuple[T, ...]) -> T:
        return items[self.rng.randrange(len(items))]

    def sample(self, items: list[T] | tuple[T, ...], k: int) -> list[T]:
        return self.rng.sample(list(items), k)

    def shuffle(self, items: list[T]) -> list[T]:
        out = list(items)
        self.rng.shuffle(out)
        return out

    def person(self, role: str = "", domain: str | None = None) -> Person:
        for _ in range(1000):
            first, last = self.pick(FIRST), self.pick(LAST)
            if f"{first} {last}" not in self._used_names and first not in {
                n.split()[0] for n in self._used_names
            }:
                break
        else:  # pragma: no cover - 50 first names is plenty for a scenario's cast
            first, last = self.pick(FIRST), self.pick(LAST) + str(len(self._used_names))
        self._used_names.add(f"{first} {last}")
        dom = domain or self.domain
        email = f"{first}.{last}@{dom}".lower()
        return Person(
            name=f"{first} {last}", email=email, role=role, handle=f"{first}.{last}".lower()
        )

    def amount(self, lo: float, hi: float, step: float = 0.01) -> float:
        steps = int((hi - lo) / step)
        return round(lo + self.rng.randint(0, steps) * step, 2)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def start(self) -> datetime:
        """A Monday 08:00 UTC in 2025, different per seed."""
        base = datetime(2025, 1, 6, 8, 0, tzinfo=UTC)  # a Monday
        return base + timedelta(weeks=self.rng.randint(0, 44))

    def at(self, start: datetime, day: int, hour: int, minute: int | None = None) -> datetime:
        """Day ``day`` (0 = the start day) at ``hour``:``minute`` (random minute if None)."""
        m = self.rng.choice((0, 5, 10, 15, 20, 30, 40, 45, 50)) if minute is None else minute
        d = start.date() + timedelta(days=day)
        return datetime.combine(d, time(hour, m), tzinfo=UTC)

    def msgid(self, tag: str) -> str:
        self._n += 1
        return f"<{self.scenario}.{self.seed}.{tag}.{self._n}@mail.k3stack.test>"

    def ref(self, prefix: str) -> str:
        return f"{prefix}-{self.rng.randint(1000, 9999)}"


def money(x: float) -> str:
    return f"${x:,.2f}"


def day_name(dt: datetime) -> str:
    return dt.strftime("%A %d %B")


def people_dict(p: Person) -> dict[str, Any]:
    return {"name": p.name, "email": p.email}
