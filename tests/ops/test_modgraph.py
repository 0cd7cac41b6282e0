"""scripts/modgraph, which make check runs: it finds who calls whom from
object files, fails on a cycle, and keeps README's diagram current."""
import os
import subprocess

import wsfstest

MODGRAPH = os.path.join(wsfstest.SRCDIR, "scripts", "modgraph")


def objects(base, sources):
    """Compile {name: C source} in base as automake would name the
    objects of a program p in directory d: d/p-NAME.o."""
    d = base / "d"
    d.mkdir(parents=True)
    out = []
    for name, text in sources.items():
        (d / f"{name}.c").write_text(text)
        o = d / f"p-{name}.o"
        subprocess.run(["cc", "-c", "-o", str(o), str(d / f"{name}.c")],
                       check=True)
        out.append(os.path.relpath(o, base))
    return out


def modgraph(*args, cwd):
    return subprocess.run([wsfstest.PYTHON, MODGRAPH, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_graph_and_cycle(tmp_path):
    objs = objects(tmp_path, {
        "top": "void mid(void); void top(void) { mid(); }\n",
        "mid": "void low(void); int shared;\n"
               "void mid(void) { low(); shared++; }\n",
        "low": "extern int shared; void low(void) { shared = 0; }\n",
    })
    p = modgraph("d/p:", *objs, "-lpthread", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    # Callers first; data (shared) is no call, linker flags are skipped.
    assert p.stdout.split("\n")[:4] == [
        "d/p:", "  d/top -> d/mid", "  d/mid -> d/low", "  d/low -> -"]
    assert modgraph("--check", "d/p:", *objs, cwd=tmp_path).stdout == ""
    cyc = objects(tmp_path / "c", {
        "a": "void b(void); void a(void) { b(); }\n",
        "b": "void a(void); void b(void) { a(); }\n",
    })
    p = modgraph("--check", "d/p:", *cyc, cwd=tmp_path / "c")
    assert p.returncode == 1
    assert "a cycle: d/a -> d/b -> d/a" in p.stderr


def test_readme_block(tmp_path):
    objs = objects(tmp_path, {
        "top": "void low(void); void top(void) { low(); }\n",
        "low": "void low(void) { }\n",
    })
    doc = tmp_path / "README.md"
    begin = "<!-- modgraph: begin (make modgraph-readme writes this block) -->"
    doc.write_text(f"# x\n\n{begin}\n    stale\n<!-- modgraph: end -->\nend\n")
    p = modgraph("--check", "--readme", str(doc), "d/p:", *objs,
                 cwd=tmp_path)
    assert p.returncode == 1 and "make modgraph-readme" in p.stderr
    p = modgraph("--readme", str(doc), "--update", "d/p:", *objs,
                 cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    text = doc.read_text()
    assert "    d/p:\n      d/top -> d/low\n      d/low -> -\n" in text
    assert text.startswith("# x\n") and text.endswith("end\n")
    p = modgraph("--check", "--readme", str(doc), "d/p:", *objs,
                 cwd=tmp_path)
    assert p.returncode == 0, p.stderr
