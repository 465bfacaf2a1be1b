"""The production shape's processes: what each runs, and which run under `nice`."""

from __future__ import annotations

from kiln.shape import BACKGROUND, PROCESSES, Shape, free_port


def test_background_processes_run_under_nice_and_the_web_and_extender_do_not(tmp_path):
    shape = Shape(port=free_port(), environment={}, workdir=tmp_path)
    for name in PROCESSES:
        argv = shape.processes[name].argv
        assert (argv[0] == "nice") == (name in BACKGROUND), (name, argv)
    assert set(BACKGROUND) == {"worker", "beat", "writer"}


def test_the_background_prefix_can_be_left_out(tmp_path):
    shape = Shape(port=free_port(), environment={}, workdir=tmp_path, background_prefix=())
    assert all(shape.processes[name].argv[0] != "nice" for name in PROCESSES)


def test_a_free_port_and_the_one_above_it_both_bind(tmp_path):
    import socket

    port = free_port()
    assert 20000 <= port < 32000
    with socket.socket() as low, socket.socket() as high:
        low.bind(("127.0.0.1", port))
        high.bind(("127.0.0.1", port + 1))
