"""``python -m cleanrl_style.llm.episodes``: reading a run's held-out episodes."""

from __future__ import annotations

import json

import pytest

from cleanrl_style.llm.episodes import EPISODES_FILE, main, read_episodes, select


def episode(task_id, reward, cut=0, step=4, suffix="", answer="print(3)"):
    messages = [
        {"role": "system", "content": "Use the python tool."},
        {"role": "user", "content": f"Task {task_id}"},
        {"role": "assistant", "content": answer},
        {"role": "tool", "content": "3"},
    ]
    return {"step": step, "suffix": suffix, "task_id": task_id, "reward": reward, "turns": 1, "cut": cut, "messages": messages}


@pytest.fixture
def run(tmp_path):
    rows = [episode(7, 1.0), episode(9, 0.0, cut=1, answer="for i in range(9): print(i)"), episode(11, 0.0)]
    (tmp_path / EPISODES_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_the_file_is_named_after_the_held_out_csv():
    assert EPISODES_FILE == "held_out_episodes.jsonl"


def test_without_task_ids_one_line_per_episode_and_the_success(run, capsys):
    assert main([str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "step 4  task 7  reward 1  1 assistant messages"
    assert lines[1] == "step 4  task 9  reward 0  1 assistant messages  cut"
    assert lines[-1] == "3 of 3 episodes, success 0.333"


def test_filters_combine(run, capsys):
    assert main([str(run / EPISODES_FILE), "--reward", "0", "--cut"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[1] for line in lines[:-1]] == ["task 9"] and lines[-1] == "1 of 3 episodes, success 0.000"
    episodes = read_episodes(run / EPISODES_FILE)
    assert [e["task_id"] for e in select(episodes, reward=0.0)] == [9, 11]
    assert select(episodes, step=5) == [] and [e["task_id"] for e in select(episodes, suffix="")] == [7, 9, 11]


def test_task_ids_print_every_message_under_its_role(run, capsys):
    assert main([str(run), "--task-id", "9", "11"]) == 0
    out = capsys.readouterr().out
    first, second = out.split("\n\n")
    assert first.splitlines() == [
        "=== step 4  task 9  reward 0  1 assistant messages  cut ===",
        "--- system ---",
        "Use the python tool.",
        "--- user ---",
        "Task 9",
        "--- assistant ---",
        "for i in range(9): print(i)",
        "--- tool ---",
        "3",
    ]
    assert second.startswith("=== step 4  task 11  reward 0")


def test_nothing_selected_is_said_and_fails(run, capsys):
    assert main([str(run), "--task-id", "8"]) == 1
    assert "no episode of the 3" in capsys.readouterr().err


def test_a_run_without_the_file_names_the_cause(tmp_path, capsys):
    (tmp_path / "held_out.csv").write_text("step,suffix,task_id,reward,turns,cut\n")
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert EPISODES_FILE in err and "evaluate its model again" in err


def test_a_damaged_or_foreign_line_names_its_number(tmp_path, capsys):
    path = tmp_path / EPISODES_FILE
    path.write_text(json.dumps(episode(1, 1.0)) + "\n{not json\n")
    assert main([str(path)]) == 2
    assert f"{path}:2 is not a JSON line" in capsys.readouterr().err
    path.write_text(json.dumps({"task_id": 1}) + "\n")
    with pytest.raises(ValueError, match=r":1 lacks \['cut', 'messages'"):
        read_episodes(path)
