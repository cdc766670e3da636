"""vitddp_tools.article: what names a tar's runs in the tables."""
import os
import tarfile

from vitddp_tools import article


def test_a_tar_unpacks_into_a_folder_named_as_the_tar(tmp_path):
    # The 1-GPU figures name their invocation by its folder: for a tar with the manifest at its
    # root that folder is the unpacked tar, so it carries the tar's name, never a random one.
    src = tmp_path / "src"
    src.mkdir()
    (src / "manifest.tsv").write_text("transport\tprecision\timpl\tkey\tranks\trc\n")
    tar = tmp_path / "h5.tar.xz"
    with tarfile.open(tar, "w:xz") as t:
        t.add(src / "manifest.tsv", arcname="manifest.tsv")
    work = tmp_path / "work"
    work.mkdir()
    for _ in range(2):
        d = article.unpack(str(tar), str(work))
        assert os.path.basename(d) == "h5.tar.xz"
        assert os.path.isfile(os.path.join(d, "manifest.tsv"))
    assert article.unpack(str(src), str(work)) == str(src)  # a folder is read where it is
