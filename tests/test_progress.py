"""Progress of a run without a terminal: plain lines with the step, rate, figures and time left."""

from __future__ import annotations

from cleanrl_style.progress import Progress, format_duration


def test_a_plain_line_at_the_first_update_then_at_most_every_interval(capsys):
    progress = Progress(total=1000, initial=0, bar=False, every=3600)
    progress.update(100, recent_return=12.34, sps=1234.5)
    progress.update(200, recent_return=15.0, sps=1500.0)  # within the interval: no line
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("[progress] step 100/1,000 (10.0%) | SPS 1,234 | return 12.3 | elapsed 0:00:0")
    assert " | left " in lines[0]
    progress.close()  # the step reached since the last line, for the end of a log
    (last,) = capsys.readouterr().out.splitlines()
    assert last.startswith("[progress] step 200/1,000 (20.0%) | SPS 1,500 | return 15.0")


def test_agents_add_their_own_figures(capsys):
    progress = Progress(total=200, initial=10, bar=False, every=1e-9)
    progress.update(10, extra={"tokens/s": 14.63, "success": 0.5, "rollout turn": "3/8"})  # inside an iteration
    progress.update(11, extra={"tokens/s": 15.2, "update micro-batch": "2/4"})
    first, second = capsys.readouterr().out.splitlines()
    assert first.startswith("[progress] step 10/200 (5.0%) | tokens/s 14.63 | success 0.5 | rollout turn 3/8 | elapsed ")
    assert " left " not in first  # no step done in this process yet: no rate to extrapolate
    assert "| tokens/s 15.2 | update micro-batch 2/4 |" in second and " | left " in second


def test_time_left_extrapolates_the_rate_of_this_process():
    progress = Progress(total=1000, initial=500, bar=False, every=0)
    progress.update(600)
    start_time, _ = progress._start
    # 100 steps in 10 s since the (resumed) start: 400 left take 40 s.
    assert progress.line(now=start_time + 10).endswith("| elapsed 0:00:10 | left 0:00:40")


def test_no_lines_when_the_interval_is_zero(capsys):
    progress = Progress(total=10, bar=False, every=0)
    progress.update(5)
    progress.close()
    assert capsys.readouterr().out == ""


def test_durations_read_as_hours_minutes_seconds():
    assert format_duration(0) == "0:00:00"
    assert format_duration(3725.9) == "1:02:05"
    assert format_duration(90000) == "25:00:00"
