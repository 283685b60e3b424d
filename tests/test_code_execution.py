"""The code functions the server runs in a container (`tools/code_execution.py`), below any
protocol: what the model reads and what the renderers get of `python`, `shell`, `bash` and
`text_editor`, on a real bubblewrap sandbox and a real store; failures as calls the model reads."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from responsekit.canonical.errors import APIError
from responsekit.canonical.server_tools import CODE_FUNCTIONS, CodeSpec
from responsekit.config import Settings
from responsekit.containers.bubblewrap import bubblewrap_runtime
from responsekit.containers.runtime import Limits, SandboxUnavailable
from responsekit.containers.service import Containers
from responsekit.files.service import VectorStores
from responsekit.store import Store
from responsekit.tools import ServerTools
from responsekit.tools.code_execution import add_code_execution

from .conftest import DATABASES

OWNER, OTHER = "a" * 64, "b" * 64


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    try:
        bubblewrap_runtime(tmp_path / "probe")
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox on this machine: {exc}")
    return tmp_path


async def _service(
    database_url: str, root: Path, limits: Limits = Limits()
) -> tuple[Store, VectorStores, Containers]:
    settings = Settings(probe=False, data_dir=root, database_url=database_url)
    store = await Store.open(database_url)
    files = await VectorStores.open(settings, store.database)
    return (
        store,
        files,
        Containers(store.database, bubblewrap_runtime(root / "containers"), files, limits),
    )


def _run(database_url: str, root: Path, body: Any, limits: Limits = Limits()) -> Any:
    async def go() -> Any:
        store, files, containers = await _service(database_url, root, limits)
        made: list[str] = []
        try:
            return await body(containers, made)
        finally:
            for container_id in made:
                await containers.delete(OWNER, container_id)
            await containers.close()
            await files.close()
            await store.close()

    return asyncio.run(go())


async def _tools(
    containers: Containers, made: list[str], functions: tuple[Any, ...], container: Any = None
) -> tuple[ServerTools, str]:
    tools = ServerTools()
    spec = CodeSpec(
        {"type": "auto"} if container is None else container, functions, param="tools[0].container"
    )
    await add_code_execution(tools, [spec], OWNER, containers)
    container_id = tools.functions[0][0].container
    assert container_id is not None
    made.append(container_id)
    return tools, container_id


async def _call(tools: ServerTools, function: str, arguments: dict[str, Any] | str) -> Any:
    origin = next(
        origin for origin, tool in tools.functions if tool.name == CODE_FUNCTIONS[function]
    )
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return await tools.run(origin, text)


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_python_keeps_its_variables_and_reports_logs_images_and_files(sandbox, database_url):
    async def body(containers: Containers, made: list[str]) -> None:
        tools, container_id = await _tools(containers, made, ("python",))
        assert [f.name for _, f in tools.functions] == ["python"]
        first = await _call(tools, "python", {"code": "x = 6 * 7\nprint('set', x)"})
        assert first.error is None and first.output.strip() == "set 42"
        assert first.data["function"] == "python" and first.data["container"]["id"] == container_id
        assert isinstance(first.data["container"]["expires_at"], int)
        # raw code (a small model's habit), fenced, uses the variable of the first call
        second = await _call(tools, "python", "```python\nprint(x + 1)\n```")
        assert second.output.strip() == "43" and second.data["code"] == "print(x + 1)"
        chart = await _call(tools, "python", {"code": (
            "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
            "plt.plot([1, 2, 3])\nplt.savefig('/mnt/data/chart.png')\nplt.show()\nprint('drawn')")})  # fmt: skip
        assert chart.error is None, chart.error
        assert chart.data["images"] and chart.data["images"][0].startswith("iVBOR")  # a PNG, base64
        assert [f["path"] for f in chart.data["files"]] == ["/mnt/data/chart.png"]
        assert chart.data["files"][0]["file_id"].startswith("cfile_")
        assert "/mnt/data/chart.png" in chart.output and "image" in chart.output
        failed = await _call(tools, "python", {"code": "1 / 0"})
        assert (
            failed.error is None
            and failed.data["error"] is True
            and "ZeroDivisionError" in failed.output
        )
        bad = await _call(tools, "python", {"nothing": 1})
        assert bad.error and bad.data["error_code"] == "invalid_tool_input"

    _run(database_url, sandbox, body)


def test_shell_and_bash_run_commands_with_their_outcomes(sandbox, database_url):
    async def body(containers: Containers, made: list[str]) -> None:
        tools, _ = await _tools(containers, made, ("shell", "bash"))
        ran = await _call(
            tools, "shell", {"commands": ["echo hi > a.txt && cat a.txt", "ls /nowhere"]}
        )
        assert ran.error is None
        outputs = ran.data["outputs"]
        assert outputs[0] == {"stdout": "hi\n", "stderr": "", "exit_code": 0, "timed_out": False}
        assert outputs[1]["exit_code"] != 0 and "nowhere" in outputs[1]["stderr"]
        assert [f["path"] for f in ran.data["files"]] == ["/mnt/data/a.txt"]
        assert "Command 2:" in ran.output and "[exit code 0]" in ran.output
        cut = await _call(
            tools, "shell", {"commands": ["yes | head -c 5000"], "max_output_length": 10}
        )
        assert len(cut.data["outputs"][0]["stdout"]) == 10 and cut.data["max_output_length"] == 10
        slow = await _call(tools, "shell", {"commands": ["sleep 5"], "timeout_ms": 300})
        assert slow.data["outputs"][0]["timed_out"] is True and "[timed out]" in slow.output
        bash = await _call(tools, "bash", {"command": "cat a.txt; exit 3"})
        assert (
            bash.data["stdout"] == "hi\n"
            and bash.data["exit_code"] == 3
            and "[exit code 3]" in bash.output
        )
        bad = await _call(tools, "bash", {"command": ""})
        assert bad.error and bad.data["error_code"] == "invalid_tool_input"

    _run(database_url, sandbox, body)


def test_the_text_editor_views_creates_replaces_and_inserts(sandbox, database_url):
    async def body(containers: Containers, made: list[str]) -> None:
        tools, _ = await _tools(containers, made, ("text_editor", "bash"))
        created = await _call(tools, "text_editor", {"command": "create", "path": "/mnt/data/s.py",
                                                     "file_text": "a = 1\nb = 2\n"})  # fmt: skip
        assert created.error is None and created.data["is_file_update"] is False
        assert created.data["files"][0]["path"] == "/mnt/data/s.py"
        again = await _call(
            tools,
            "text_editor",
            {"command": "create", "path": "s.py", "file_text": "a = 1\nb = 2\n"},
        )
        assert again.data["is_file_update"] is True
        view = await _call(tools, "text_editor", {"command": "view", "path": "/mnt/data/s.py"})
        assert view.data["content"] == "a = 1\nb = 2\n" and view.data["total_lines"] == 3
        assert "     1\ta = 1" in view.output
        replaced = await _call(tools, "text_editor", {"command": "str_replace", "path": "/mnt/data/s.py",
                                                      "old_str": "b = 2", "new_str": "b = 3"})  # fmt: skip
        assert (
            replaced.error is None
            and replaced.data["old_start"] == 2
            and replaced.data["lines"] == ["b = 3"]
        )
        inserted = await _call(tools, "text_editor", {"command": "insert", "path": "/mnt/data/s.py",
                                                      "insert_line": 0, "new_str": "import os"})  # fmt: skip
        assert inserted.error is None
        ran = await _call(tools, "bash", {"command": "cat s.py"})
        assert ran.data["stdout"] == "import os\na = 1\nb = 3\n"
        twice = await _call(tools, "text_editor", {"command": "str_replace", "path": "/mnt/data/s.py",
                                                   "old_str": "=", "new_str": "=="})  # fmt: skip
        assert twice.error and twice.data["error_code"] == "invalid_tool_input"
        missing = await _call(
            tools, "text_editor", {"command": "view", "path": "/mnt/data/none.txt"}
        )
        assert missing.error and missing.data["error_code"] == "file_not_found"
        listing = await _call(tools, "text_editor", {"command": "view", "path": "/mnt/data"})
        assert "/mnt/data/s.py" in listing.output
        out = await _call(tools, "text_editor", {"command": "view", "path": "/etc/passwd"})
        assert out.error and out.data["error_code"] == "invalid_tool_input"
        up = await _call(
            tools, "text_editor", {"command": "create", "path": "/mnt/data/../x", "file_text": "x"}
        )
        assert up.error and up.data["error_code"] == "invalid_tool_input"

    _run(database_url, sandbox, body)


def test_failures_are_calls_the_model_reads(sandbox, database_url):
    """An endless loop stops at the wall-clock limit; a container deleted mid-request is a
    failed call; another key's container id is the request's 404, never a run."""

    async def body(containers: Containers, made: list[str]) -> None:
        tools, container_id = await _tools(containers, made, ("python",))
        endless = await _call(tools, "python", {"code": "while True:\n    pass"})
        assert endless.error and "time limit" in endless.error
        assert (
            endless.data["error_code"] == "execution_time_exceeded"
            and endless.data["timed_out"] is True
        )
        after = await _call(tools, "python", {"code": "print('still here')"})
        assert after.error is None and after.output.strip().endswith("still here"), after
        with pytest.raises(APIError) as caught:
            await add_code_execution(ServerTools(), [CodeSpec(container_id, ("python",), param="tools[0].container")],
                                     OTHER, containers)  # fmt: skip
        assert caught.value.status == 404 and caught.value.param == "tools[0].container"
        await containers.delete(OWNER, container_id)
        gone = await _call(tools, "python", {"code": "print(1)"})
        assert gone.error and "not found" in gone.error and gone.data["error_code"] == "unavailable"

    _run(database_url, sandbox, body, Limits(wall_seconds=2.0))


def test_an_auto_container_reuses_the_conversations_live_one(sandbox, database_url):
    async def body(containers: Containers, made: list[str]) -> None:
        tools, container_id = await _tools(containers, made, ("python",))
        await _call(tools, "python", {"code": "kept = 'yes'"})
        history = [{"type": "code_interpreter_call", "id": "ci_1", "container_id": container_id, "code": "",
                    "status": "completed", "outputs": None}]  # fmt: skip
        again = ServerTools()
        await add_code_execution(
            again, [CodeSpec({"type": "auto"}, ("python",))], OWNER, containers, history
        )
        assert again.functions[0][0].container == container_id
        read = await _call(again, "python", {"code": "print(kept)"})
        assert read.output.strip() == "yes"
        # another key's container in a history is no container of this key's: a new one is made
        other = ServerTools()
        await add_code_execution(
            other, [CodeSpec({"type": "auto"}, ("python",))], OTHER, containers, history
        )
        assert other.functions[0][0].container not in (None, container_id)
        await containers.delete(OTHER, str(other.functions[0][0].container))

    _run(database_url, sandbox, body)
