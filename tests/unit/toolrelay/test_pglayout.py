"""Where the embedded PostgreSQL's cluster and socket go, and as whom it runs: toolrelay.pglayout's rules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.toolrelay.conftest import root_only
from toolrelay.pglayout import (
    ClusterUnusable,
    ServerUser,
    closed_folder,
    find_cluster,
    new_cluster_folder,
    server_user,
    socket_folder,
)

STRANGER = ServerUser("stranger", uid=54321, gid=54321, switch=True)


def test_a_folder_closed_to_others_stops_traversal(open_folder: Path) -> None:
    closed = open_folder / "closed"
    (closed / "inner").mkdir(parents=True)
    closed.chmod(0o700)
    assert closed_folder(closed / "inner", STRANGER) == closed

    closed.chmod(0o701)  # search without read is enough to pass through
    assert closed_folder(closed / "inner", STRANGER) is None


def test_owner_bits_decide_for_the_owner_even_when_others_may_pass(open_folder: Path) -> None:
    folder = open_folder / "theirs"
    folder.mkdir()
    folder.chmod(0o007)
    owner = ServerUser("me", uid=os.geteuid(), gid=os.getegid(), switch=True)
    if owner.uid == 0:  # root passes everywhere: give the folder to someone who is not
        os.chown(folder, STRANGER.uid, STRANGER.gid)
        owner = STRANGER
    assert closed_folder(folder, owner) == folder


def test_a_short_cluster_path_keeps_the_socket_inside() -> None:
    cluster = Path("/srv/toolrelay/pg")
    assert socket_folder(cluster, server_user()) == cluster


def test_a_long_cluster_path_puts_the_socket_in_a_private_tmp_folder(tmp_path: Path) -> None:
    user = server_user()
    cluster = tmp_path / ("x" * 120) / "pg"
    folder = socket_folder(cluster, user)
    try:
        assert folder.parent == Path("/tmp") and folder.name.startswith("toolrelay-pg-")
        assert (folder.stat().st_mode & 0o777, folder.stat().st_uid) == (0o700, user.uid)
        assert socket_folder(cluster, user) == folder  # the same one next time
    finally:
        folder.rmdir()


def test_a_cluster_path_with_a_comma_puts_the_socket_in_tmp(tmp_path: Path) -> None:
    folder = socket_folder(tmp_path / "a,b" / "pg", server_user())  # libpq would read host=a,b as two hosts
    try:
        assert folder.name.startswith("toolrelay-pg-")
    finally:
        folder.rmdir()


def test_a_socket_folder_someone_else_could_enter_is_refused(tmp_path: Path) -> None:
    user = server_user()
    cluster = tmp_path / ("y" * 120) / "pg"
    folder = socket_folder(cluster, user)
    try:
        folder.chmod(0o755)
        with pytest.raises(ClusterUnusable, match="closed to others"):
            socket_folder(cluster, user)
    finally:
        folder.rmdir()


def test_a_cluster_of_another_user_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pg").mkdir()
    (tmp_path / "pg" / "PG_VERSION").write_text("18\n")
    with pytest.raises(ClusterUnusable, match="belongs to"):
        find_cluster(tmp_path, STRANGER)


def test_a_dangling_link_means_no_cluster_yet(tmp_path: Path) -> None:
    (tmp_path / "pg").symlink_to(tmp_path / "gone")
    assert find_cluster(tmp_path, server_user()) is None
    assert not (tmp_path / "pg").is_symlink()


@root_only
def test_as_root_a_data_dir_the_server_user_cannot_reach_gets_its_cluster_in_the_state_dir(
        tmp_path: Path, state_dir: Path) -> None:
    user = server_user()
    data_dir = tmp_path / "closed" / "data"
    data_dir.mkdir(parents=True)
    (tmp_path / "closed").chmod(0o700)
    folder = new_cluster_folder(data_dir, user, state_dir)
    try:
        assert folder.parent == state_dir
        assert (folder.stat().st_uid, folder.stat().st_mode & 0o777) == (user.uid, 0o700)
        assert (tmp_path / "closed").stat().st_mode & 0o777 == 0o700
    finally:
        folder.rmdir()


@root_only
def test_as_root_a_data_dir_the_server_user_can_reach_keeps_its_cluster(open_folder: Path, state_dir: Path) -> None:
    user = server_user()
    folder = new_cluster_folder(open_folder, user, state_dir)
    assert folder == open_folder.resolve() / "pg.new"
    assert (folder.stat().st_uid, folder.stat().st_mode & 0o777) == (user.uid, 0o700)
