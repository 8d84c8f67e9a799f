"""A virtual file system held in memory: paths are keys of a dict, never the host's files."""

from __future__ import annotations

import posixpath
import random
from typing import Any, cast

from envs.text.parsing import ToolCall
from envs.text.suites.base import C, Draft, SuiteDefinition, ToolError, ToolSuite, World, read_only
from envs.text.suites.words import WORDS, sentence


class FileSystem(ToolSuite):
    """A POSIX-like tree: ``files`` maps absolute path -> text, ``directories`` holds absolute paths."""

    name = "filesystem"
    description = "an in-memory file system"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"files": {}, "directories": ["/"], "cwd": "/"}

    def _load(self, config: dict[str, Any]) -> None:
        self.files: dict[str, str] = {}
        self.directories: set[str] = {"/"}
        for d in config["directories"]:
            self._add_directory_chain(self._absolute(d, cwd="/"))
        for path, content in config["files"].items():
            path = self._absolute(path, cwd="/")
            self._add_directory_chain(posixpath.dirname(path))
            self.files[path] = str(content)
        self.cwd: str = self._absolute(config["cwd"], cwd="/")
        if self.cwd not in self.directories:
            raise ValueError(f"FileSystem: cwd {self.cwd!r} is not a directory of the config")

    # -- helpers (private: not tools) --
    def _absolute(self, path: str, cwd: str | None = None) -> str:
        joined = posixpath.join(cwd if cwd is not None else self.cwd, path)
        normal = posixpath.normpath(joined)
        return "/" + normal.lstrip("/")  # normpath keeps a leading "//"

    def _add_directory_chain(self, directory: str) -> None:
        while directory not in self.directories:
            self.directories.add(directory)
            directory = posixpath.dirname(directory)

    def _require_file(self, path: str) -> str:
        absolute = self._absolute(path)
        if absolute not in self.files:
            raise ToolError(f"no such file: {path}")
        return absolute

    def _require_parent(self, absolute: str) -> None:
        if posixpath.dirname(absolute) not in self.directories:
            raise ToolError(f"no such directory: {posixpath.dirname(absolute)}")

    # -- tools --
    @read_only
    def pwd(self) -> str:
        """Return the current working directory."""
        return self.cwd

    @read_only
    def ls(self, path: str = ".") -> list[str]:
        """List the entries of a directory, sorted; directories end with a slash.

        Args:
            path: Directory to list, absolute or relative to the current directory.
        """
        directory = self._absolute(path)
        if directory not in self.directories:
            raise ToolError(f"no such directory: {path}")
        children = [posixpath.basename(p) + "/" for p in self.directories if p != "/" and posixpath.dirname(p) == directory]
        children += [posixpath.basename(p) for p in self.files if posixpath.dirname(p) == directory]
        return sorted(children)

    def cd(self, path: str) -> str:
        """Change the current working directory and return the new one.

        Args:
            path: Target directory, absolute or relative (".." goes up).
        """
        directory = self._absolute(path)
        if directory not in self.directories:
            raise ToolError(f"no such directory: {path}")
        self.cwd = directory
        return self.cwd

    def mkdir(self, path: str) -> str:
        """Create a directory (its parent must exist) and return its absolute path.

        Args:
            path: Directory to create, absolute or relative.
        """
        directory = self._absolute(path)
        if directory in self.directories or directory in self.files:
            raise ToolError(f"already exists: {path}")
        self._require_parent(directory)
        self.directories.add(directory)
        return directory

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a text file and return its absolute path.

        Args:
            path: File to write, absolute or relative; its directory must exist.
            content: The full new text of the file.
        """
        absolute = self._absolute(path)
        if absolute in self.directories:
            raise ToolError(f"is a directory: {path}")
        self._require_parent(absolute)
        self.files[absolute] = content
        return absolute

    @read_only
    def read_file(self, path: str) -> str:
        """Return the whole text of a file.

        Args:
            path: File to read, absolute or relative.
        """
        return self.files[self._require_file(path)]

    def remove(self, path: str) -> str:
        """Delete a file or an empty directory and return its absolute path.

        Args:
            path: File or empty directory to delete.
        """
        absolute = self._absolute(path)
        if absolute in self.files:
            del self.files[absolute]
            return absolute
        if absolute in self.directories and absolute != "/":
            if any(posixpath.dirname(p) == absolute for p in list(self.files) + list(self.directories) if p != "/"):
                raise ToolError(f"directory not empty: {path}")
            if self.cwd == absolute:
                raise ToolError("cannot remove the current directory")
            self.directories.remove(absolute)
            return absolute
        raise ToolError(f"no such file or directory: {path}")

    def _destination(self, source: str, destination: str) -> str:
        target = self._absolute(destination)
        if target in self.directories:  # like mv/cp: into the directory, keeping the name
            target = posixpath.join(target, posixpath.basename(source))
        self._require_parent(target)
        if target in self.directories:
            raise ToolError(f"is a directory: {destination}")
        return target

    def move(self, source: str, destination: str) -> str:
        """Move or rename a file and return its new absolute path.

        Args:
            source: File to move.
            destination: New path, or an existing directory to move the file into.
        """
        origin = self._require_file(source)
        target = self._destination(origin, destination)
        self.files[target] = self.files.pop(origin)
        return target

    def copy(self, source: str, destination: str) -> str:
        """Copy a file and return the absolute path of the copy.

        Args:
            source: File to copy.
            destination: Path of the copy, or an existing directory to copy the file into.
        """
        origin = self._require_file(source)
        target = self._destination(origin, destination)
        self.files[target] = self.files[origin]
        return target

    @read_only
    def grep(self, path: str, pattern: str) -> list[str]:
        """Return the lines of a file that contain a text pattern (plain substring, case-sensitive).

        Args:
            path: File to search.
            pattern: Text to look for.
        """
        return [line for line in self.files[self._require_file(path)].splitlines() if pattern in line]

    @read_only
    def count_lines(self, path: str) -> int:
        """Return the number of lines in a file.

        Args:
            path: File to count.
        """
        return len(self.files[self._require_file(path)].splitlines())


# ---- initial states and task templates (drawn by envs.text.tasks) ----------------------------


def filesystem_of(world: World) -> FileSystem:
    """The world's filesystem suite, typed (``world.suites`` holds ``ToolSuite``)."""
    return cast(FileSystem, world.suites["filesystem"])


def initial_config(rng: random.Random, long: bool) -> dict[str, Any]:
    """A task's initial state (``long``: the long-context variant's larger one)."""
    files = {
        "/home/user/notes.txt": sentence(rng),
        "/home/user/todo.txt": "\n".join(f"- {sentence(rng)}" for _ in range(3)),
        f"/home/user/docs/report_{rng.randint(1, 9)}.txt": f"Q{rng.randint(1, 4)} report: {sentence(rng)}",
        "/home/user/docs/ideas.txt": sentence(rng),
    }
    log_lines = 1500 if long else 12
    lines = []
    for i in range(log_lines):
        level = rng.choice(["INFO", "INFO", "WARN", "ERROR"])
        lines.append(f"{i:05d} {level} {rng.choice(WORDS)} code={rng.randint(100, 999)}")
    lines[rng.randrange(log_lines)] = f"{rng.randrange(log_lines):05d} ERROR disk full code=507"  # always something to find
    files["/home/user/logs/app.log"] = "\n".join(lines)
    if long:
        for i in range(40):
            files[f"/home/user/archive/old_{i:03d}.txt"] = " ".join(sentence(rng) for _ in range(20))
    return {"files": files, "directories": ["/home/user/projects"], "cwd": "/home/user"}


def user_files(world: World) -> list[str]:
    return sorted(p for p in filesystem_of(world).files if "/archive/" not in p and not p.endswith(".log"))


def fs_write(rng: random.Random, world: World) -> Draft:
    name = f"{rng.choice(WORDS)}_{rng.randint(1, 99)}.txt"
    path = f"/home/user/{rng.choice(['docs', 'projects'])}/{name}"
    text = sentence(rng)
    return Draft(
        f"Create the file {path} containing exactly: {text}",
        [C("write_file", path=path, content=text)],
        vague=f"Create the file {path} for me.",
        clarification=f"It should contain exactly: {text}",
    )


def fs_read(rng: random.Random, world: World) -> Draft:
    path = rng.choice(user_files(world))
    return Draft(f"What does {path} say?", [C("read_file", path=path)])


def fs_move(rng: random.Random, world: World) -> Draft | None:
    candidates = [p for p in user_files(world) if not p.startswith("/home/user/projects/")]
    if not candidates:
        return None
    path = rng.choice(candidates)
    return Draft(
        f"Move {path} into /home/user/projects.",
        [C("move", source=path, destination="/home/user/projects")],
        vague=f"Move {path} into another folder.",
        clarification="Into /home/user/projects, please.",
    )


def fs_copy_new_dir(rng: random.Random, world: World) -> Draft | None:
    directory = f"/home/user/{rng.choice(WORDS)}_{rng.randint(100, 999)}"
    if directory in filesystem_of(world).directories:
        return None
    path = rng.choice(user_files(world))
    return Draft(
        f"Make a new directory {directory} and copy {path} into it.",
        [C("mkdir", path=directory), C("copy", source=path, destination=directory)],
    )


def fs_remove(rng: random.Random, world: World) -> Draft:
    path = rng.choice(user_files(world))
    return Draft(
        f"Delete the file {path}.",
        [C("remove", path=path)],
        vague="Delete one of my files.",
        clarification=f"The file is {path}.",
    )


def fs_grep_log(rng: random.Random, world: World) -> Draft:
    return Draft(
        "Which lines of /home/user/logs/app.log mention ERROR? Also, how many lines does it have?",
        [C("grep", path="/home/user/logs/app.log", pattern="ERROR"), C("count_lines", path="/home/user/logs/app.log")],
        long_output=True,
    )


def fs_read_log(rng: random.Random, world: World) -> Draft:
    return Draft(
        "Show me the full contents of /home/user/logs/app.log.",
        [C("read_file", path="/home/user/logs/app.log")],
        long_output=True,
    )


def distractor(config: dict[str, Any]) -> ToolCall:
    """A call that always succeeds and always changes the state (the noisy policy's "extra call")."""
    return ToolCall("write_file", {"path": "/home/user/scratch.txt", "content": "temporary notes"})


SUITE = SuiteDefinition(
    tools=FileSystem,
    initial_config=initial_config,
    templates=(
        fs_write,
        fs_read,
        fs_move,
        fs_copy_new_dir,
        fs_remove,
        fs_grep_log,
    ),
    long_templates=(
        fs_grep_log,
        fs_read_log,
    ),
    distractor=distractor,
)
