"""Read the held-out episodes an LLM run wrote (``runs/<run>/held_out_episodes.jsonl``).

Every final held-out evaluation appends each greedy episode there: step, reward-token suffix, task
id, reward, assistant messages, whether the collector cut it, and the messages themselves. Without
``--task-id`` this prints one line per episode; with it, those episodes' messages in full::

    python -m cleanrl_style.llm.episodes runs/<run>                      # one line per episode
    python -m cleanrl_style.llm.episodes runs/<run> --reward 0 --cut     # the cut failures
    python -m cleanrl_style.llm.episodes runs/<run> --task-id 32 102     # two episodes, message by message
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from cleanrl_style.llm.rollout import HELD_OUT_COLUMNS, held_out_episodes_path
from cleanrl_style.llm.train import HELD_OUT_FILE

EPISODES_FILE = held_out_episodes_path(Path(HELD_OUT_FILE)).name


def episodes_file(path: Path) -> Path:
    """``path`` itself if it is a file, else the episodes file in the run folder ``path``.

    Raises:
        FileNotFoundError: neither exists (runs before the file was written have only ``held_out.csv``).
    """
    file = path if path.is_file() else path / EPISODES_FILE
    if not file.is_file():
        raise FileNotFoundError(
            f"no {EPISODES_FILE} at {path}: give a run folder whose final held-out evaluation wrote one "
            "(or the file itself); a run evaluated before the file existed has only held_out.csv, "
            "so evaluate its model again to read its episodes"
        )
    return file


def read_episodes(file: Path) -> list[dict[str, Any]]:
    """The episodes in ``file``, in the order they were written.

    Raises:
        ValueError: a line is not JSON or lacks a field (names the line).
    """
    episodes = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{file}:{number} is not a JSON line ({error.msg}); the file is damaged") from None
        missing = {*HELD_OUT_COLUMNS, "messages"} - set(row)
        if missing:
            raise ValueError(f"{file}:{number} lacks {sorted(missing)}; not a held-out episodes file")
        episodes.append(row)
    return episodes


def select(
    episodes: Iterable[dict[str, Any]],
    *,
    task_ids: Sequence[int] = (),
    step: int | None = None,
    reward: float | None = None,
    cut: bool = False,
    suffix: str | None = None,
) -> list[dict[str, Any]]:
    """The episodes that pass every filter given (``cut``: only cut episodes)."""
    return [
        e
        for e in episodes
        if (not task_ids or e["task_id"] in task_ids)
        and (step is None or e["step"] == step)
        and (reward is None or e["reward"] == reward)
        and (not cut or e["cut"])
        and (suffix is None or e["suffix"] == suffix)
    ]


def header(episode: dict[str, Any]) -> str:
    suffix = f"suffix {episode['suffix']}  " if episode["suffix"] else ""
    cut = "  cut" if episode["cut"] else ""
    return (
        f"step {episode['step']}  {suffix}task {episode['task_id']}  reward {episode['reward']:g}  "
        f"{episode['turns']} assistant messages{cut}"
    )


def transcript(episode: dict[str, Any]) -> str:
    """The episode's header, then each message under its role."""
    lines = [f"=== {header(episode)} ==="]
    for message in episode["messages"]:
        lines += [f"--- {message['role']} ---", message["content"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help=f"a run folder (its {EPISODES_FILE}) or the file")
    parser.add_argument("--task-id", type=int, nargs="+", default=[], help="print these tasks' episodes in full")
    parser.add_argument("--step", type=int, help="only the evaluation at this step")
    parser.add_argument("--reward", type=float, help="only episodes with this reward (0 or 1)")
    parser.add_argument("--cut", action="store_true", help="only episodes the collector cut")
    parser.add_argument("--suffix", help="only episodes under this reward-token suffix (RC-GRPO's RCTP runs)")
    args = parser.parse_args(argv)
    try:
        episodes = read_episodes(episodes_file(args.path))
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    chosen = select(episodes, task_ids=args.task_id, step=args.step, reward=args.reward, cut=args.cut, suffix=args.suffix)
    if not chosen:
        print(f"no episode of the {len(episodes)} in {args.path} passes these filters", file=sys.stderr)
        return 1
    if args.task_id:
        print("\n\n".join(transcript(e) for e in chosen))
    else:
        print("\n".join(header(e) for e in chosen))
        print(f"{len(chosen)} of {len(episodes)} episodes, success {sum(e['reward'] for e in chosen) / len(chosen):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
