"""The task generator: determinism, split, and the shape of each variant."""

from envs.text.tasks import VARIANTS, TaskSet, generate_task, split_of


def test_same_seed_gives_same_tasks():
    a = [t.to_dict() for t in TaskSet(num_tasks=40, seed=3)]
    b = [t.to_dict() for t in TaskSet(num_tasks=40, seed=3)]
    assert a == b


def test_different_seeds_give_different_tasks():
    assert generate_task(1, ("bank",), seed=0).to_dict() != generate_task(1, ("bank",), seed=1).to_dict()


def test_split_is_fixed_by_task_id_and_about_one_fifth_test():
    ids = range(2000)
    test_ids = [i for i in ids if split_of(i) == "test"]
    assert 300 < len(test_ids) < 500
    train = TaskSet(num_tasks=100, split="train")
    test = TaskSet(num_tasks=100, split="test")
    assert set(train.task_ids).isdisjoint(test.task_ids) and len(train) + len(test) == 100
    assert all(t.split == "test" for t in test)


def test_every_variant_and_suite_group_is_generated():
    tasks = list(TaskSet(num_tasks=36, seed=0))
    assert {t.variant for t in tasks} == set(VARIANTS)
    assert any(len(t.suites) == 2 for t in tasks)


def test_missing_parameter_inserts_an_ask_turn_with_empty_gold():
    task = generate_task(0, ("bank",), "missing_parameter")
    gap = [i for i, t in enumerate(task.turns) if t.kind == "missing_parameter"]
    assert len(gap) == 1 and task.turns[gap[0]].gold_calls == [] and task.turns[gap[0] + 1].gold_calls


def test_missing_function_withholds_a_tool_until_its_follow_up_turn():
    task = generate_task(2, ("travel",), "missing_function")
    (tool,) = task.withheld_tools
    gap = next(i for i, t in enumerate(task.turns) if t.kind == "missing_function")
    world = task.build_world()
    assert all(tool not in task.available_tools(i, world) for i in range(gap + 1))
    assert tool in task.available_tools(gap + 1, world) and task.turns[gap + 1].released_tools == [tool]
    assert all(c.name != tool for t in task.turns[: gap + 1] for c in t.gold_calls)


def test_long_context_tasks_have_long_tool_outputs():
    for suites in (("filesystem",), ("messaging",), ("bank",), ("travel",)):
        task = generate_task(0, suites, "long_context")
        world = task.build_world()
        outputs = [world.execute(c) for c in task.turns[0].gold_calls]
        assert len(str(outputs)) > 5_000, suites
