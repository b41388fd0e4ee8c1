"""Write the demo datasets: weather sentences -> a JSON object, as SFT messages and as preference pairs.

One clear task a 135M instruct model visibly learns in minutes of CPU LoRA: before training it
answers in prose (or malformed JSON); after, it answers with exactly this object. Generated from
templates with a fixed seed, so `python examples/make_dataset.py` rewrites the same bytes.
Held-out rows use cities and phrasings that the training rows never contain.
Preference pairs (`make demo-dpo`) prefer the exact object over a prose answer or an object with one wrong
value, so DPO has to raise the right JSON's log-probability over plausible near misses.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

TRAIN_CITIES = [
    "Oslo", "Lisbon", "Nairobi", "Toronto", "Osaka", "Lima", "Cairo", "Dublin", "Perth", "Denver",
    "Hanoi", "Madrid", "Quito", "Seoul", "Tunis", "Zurich", "Austin", "Bergen", "Chennai", "Accra",
    "Kraków", "Montreal", "Santiago", "Manila", "Helsinki", "Marseille", "Glasgow", "Boston", "Dakar", "Hobart",
]
HELDOUT_CITIES = ["Vienna", "Reykjavik", "Mumbai", "Phoenix", "Tallinn", "Auckland", "Porto", "Kyoto"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
CONDITIONS = [
    "light snow", "heavy rain", "clear skies", "fog", "scattered showers", "strong wind", "sunshine",
    "thunderstorms", "drizzle", "overcast skies", "hail", "sleet",
]
UNITS = {"C": "Celsius", "F": "Fahrenheit"}
TEMPS = {"C": (-15, 38), "F": (5, 100)}

SENTENCES = [
    "In {city} on {day} it was {t} degrees {unit} with {cond}.",
    "{day} in {city}: {cond}, {t} degrees {unit}.",
    "The forecast for {city} this {day} says {cond} and {t} degrees {unit}.",
    "{city} reported {cond} on {day}, with the thermometer at {t} degrees {unit}.",
    "Expect {cond} in {city} on {day}; temperatures around {t} degrees {unit}.",
    "On {day}, {city} saw {cond} and a temperature of {t} degrees {unit}.",
]
HELDOUT_SENTENCES = [
    "Weather update for {city}, {day}: {t} degrees {unit} and {cond}.",
    "It will be {t} degrees {unit} in {city} on {day}, with {cond}.",
]
INSTRUCTIONS = [
    "Convert this weather report to JSON: {s}",
    "Extract the weather data as JSON.\n{s}",
    "Turn the sentence into a JSON object with city, day, temperature, unit and conditions: {s}",
    "{s}\nGive me this as JSON.",
]


def example(rng: random.Random, cities: list[str], sentences: list[str]) -> dict:
    unit = rng.choice(list(UNITS))
    record = {
        "city": rng.choice(cities),
        "day": rng.choice(DAYS),
        "temperature": rng.randint(*TEMPS[unit]),
        "unit": unit,
        "conditions": rng.choice(CONDITIONS),
    }
    sentence = rng.choice(sentences).format(city=record["city"], day=record["day"], t=record["temperature"],
                                            unit=UNITS[unit], cond=record["conditions"])
    sentence = sentence[0].upper() + sentence[1:]
    prompt = rng.choice(INSTRUCTIONS).format(s=sentence)
    return {"messages": [{"role": "user", "content": prompt},
                         {"role": "assistant", "content": json.dumps(record, ensure_ascii=False)}]}


def rejected_reply(rng: random.Random, record: dict) -> str:
    """A plausible wrong answer: prose instead of JSON, or the object with one value changed."""
    if rng.random() < 0.5:
        return (f"In {record['city']} on {record['day']} expect {record['conditions']} "
                f"at {record['temperature']} degrees {UNITS[record['unit']]}.")
    wrong = dict(record)
    field = rng.choice(["temperature", "unit", "conditions", "day"])
    if field == "temperature":
        wrong[field] = record["temperature"] + rng.choice([-10, -3, 3, 10])
    elif field == "unit":
        wrong[field] = "F" if record["unit"] == "C" else "C"
    else:
        pool = CONDITIONS if field == "conditions" else DAYS
        wrong[field] = rng.choice([v for v in pool if v != record[field]])
    return json.dumps(wrong, ensure_ascii=False)


def pair(rng: random.Random, cities: list[str], sentences: list[str]) -> dict:
    """One preference row (prompt / chosen / rejected as turn lists, trl's conversational layout)."""
    user, assistant = example(rng, cities, sentences)["messages"]
    rejected = rejected_reply(rng, json.loads(assistant["content"]))
    return {"prompt": [user], "chosen": [assistant], "rejected": [{"role": "assistant", "content": rejected}]}


def build_pairs(seed: int = 1, n_train: int = 64, n_heldout: int = 8) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)  # its own generator, so the SFT files keep their bytes
    train = [pair(rng, TRAIN_CITIES, SENTENCES) for _ in range(n_train)]
    heldout = [pair(rng, HELDOUT_CITIES, HELDOUT_SENTENCES) for _ in range(n_heldout)]
    return train, heldout


def build(seed: int = 0, n_train: int = 300, n_heldout: int = 16) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    train = [example(rng, TRAIN_CITIES, SENTENCES) for _ in range(n_train)]
    heldout = [example(rng, HELDOUT_CITIES, HELDOUT_SENTENCES) for _ in range(n_heldout)]
    return train, heldout


GRPO_INSTRUCTION = '\nReply with only a JSON object with the keys "city", "day", "temperature", "unit" and "conditions".'


def prompts(rows: list[dict]) -> list[dict]:
    """GRPO prompt rows (`make demo-grpo`): the user turn with the keys spelled out (so a 135M model's samples
    differ in how many it names: GRPO learns from those differences), and the right object as `answer`."""
    return [{"prompt": [{"role": "user", "content": r["messages"][0]["content"] + GRPO_INSTRUCTION}],
             "answer": r["messages"][1]["content"]} for r in rows]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-train", type=int, default=300)
    parser.add_argument("--n-heldout", type=int, default=16)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "demo")
    args = parser.parse_args(argv)
    train, heldout = build(args.seed, args.n_train, args.n_heldout)
    write_jsonl(args.out / "train.jsonl", train)
    write_jsonl(args.out / "heldout.jsonl", heldout)
    pairs, held_pairs = build_pairs(args.seed + 1)
    write_jsonl(args.out / "preference.jsonl", pairs)
    write_jsonl(args.out / "preference-heldout.jsonl", held_pairs)
    write_jsonl(args.out / "grpo.jsonl", prompts(train[:64]))
    write_jsonl(args.out / "grpo-heldout.jsonl", prompts(heldout))
    print(f"wrote {len(train)} training and {len(heldout)} held-out rows, {len(pairs)} and {len(held_pairs)} "
          f"preference pairs to {args.out}")


if __name__ == "__main__":
    main()
