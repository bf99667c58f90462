"""The lab's NFS client: an NFS export mounted through FUSE, spoken by libnfs.

This machine's kernel has no NFS client, so a lab host cannot `mount -t nfs4`. This
program is the client instead: every file operation at the mount point becomes real
NFSv3 calls (libnfs, Debian's libnfs13) over the lab network to the lab's real NFS
server (nfs-ganesha on the head host). NFSv3: libnfs 4.0's NFSv4 cannot encode a WRITE
of more than about 4 KB ("Failed to encode COMPOUND4args"). It is NOT a simulation: the data crosses the
network and lands on the server's disk; nothing here models a figure.

    python3 nfsfuse.py 'nfs://10.78.0.11/srv/nodecert-export?version=3' /mnt/nodecert-shared

Runs in the foreground (a systemd unit keeps it); direct_io: the kernel's page cache is
never in the way, every read goes to the server. One libnfs context, single-threaded.
Standard library + Debian's python3-fusepy and libnfs13. Python 3.8+.
"""

import ctypes
import errno
import os
import stat
import sys

from fusepy import FUSE, FuseOSError, Operations

U64 = ctypes.c_uint64


class Stat64(ctypes.Structure):  # struct nfs_stat_64 (libnfs.h)
    _fields_ = [(n, U64) for n in (
        "dev", "ino", "mode", "nlink", "uid", "gid", "rdev", "size", "blksize", "blocks",
        "atime", "mtime", "ctime", "atime_nsec", "mtime_nsec", "ctime_nsec", "used")]


class StatVfs64(ctypes.Structure):  # struct nfs_statvfs_64
    _fields_ = [(n, U64) for n in (
        "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
        "f_favail", "f_fsid", "f_flag", "f_namemax")]


class Url(ctypes.Structure):  # struct nfs_url
    _fields_ = [("server", ctypes.c_char_p), ("path", ctypes.c_char_p),
                ("file", ctypes.c_char_p)]


class Dirent(ctypes.Structure):  # the head of struct nfsdirent: next, name
    pass


Dirent._fields_ = [("next", ctypes.POINTER(Dirent)), ("name", ctypes.c_char_p)]

P = ctypes.c_void_p
lib = ctypes.CDLL("libnfs.so.13", use_errno=True)
for name, res, args in (
        ("nfs_init_context", P, []), ("nfs_get_error", ctypes.c_char_p, [P]),
        ("nfs_parse_url_dir", ctypes.POINTER(Url), [P, ctypes.c_char_p]),
        ("nfs_mount", ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_char_p]),
        ("nfs_lstat64", ctypes.c_int, [P, ctypes.c_char_p, ctypes.POINTER(Stat64)]),
        ("nfs_statvfs64", ctypes.c_int, [P, ctypes.c_char_p, ctypes.POINTER(StatVfs64)]),
        ("nfs_open", ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(P)]),
        ("nfs_create", ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                                      ctypes.POINTER(P)]),
        ("nfs_close", ctypes.c_int, [P, P]), ("nfs_fsync", ctypes.c_int, [P, P]),
        ("nfs_pread", ctypes.c_int, [P, P, U64, U64, ctypes.c_void_p]),
        ("nfs_pwrite", ctypes.c_int, [P, P, U64, U64, ctypes.c_void_p]),
        ("nfs_truncate", ctypes.c_int, [P, ctypes.c_char_p, U64]),
        ("nfs_ftruncate", ctypes.c_int, [P, P, U64]),
        ("nfs_mkdir2", ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_int]),
        ("nfs_rmdir", ctypes.c_int, [P, ctypes.c_char_p]),
        ("nfs_unlink", ctypes.c_int, [P, ctypes.c_char_p]),
        ("nfs_rename", ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_char_p]),
        ("nfs_chmod", ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_int]),
        ("nfs_opendir", ctypes.c_int, [P, ctypes.c_char_p, ctypes.POINTER(P)]),
        ("nfs_readdir", ctypes.POINTER(Dirent), [P, P]),
        ("nfs_closedir", None, [P, P])):
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = res, args


def ok(rc):
    """libnfs returns -errno on failure: raise it for FUSE."""
    if rc < 0:
        raise FuseOSError(-rc)
    return rc


class NfsFs(Operations):
    def __init__(self, nfs):
        self.nfs = nfs
        self.fhs = {}  # FUSE file handle -> libnfs nfsfh
        self.next_fh = 1

    def _keep(self, fh):
        n = self.next_fh
        self.next_fh += 1
        self.fhs[n] = fh
        return n

    def getattr(self, path, fh=None):
        st = Stat64()
        ok(lib.nfs_lstat64(self.nfs, path.encode(), ctypes.byref(st)))
        return {"st_mode": st.mode, "st_nlink": st.nlink, "st_uid": st.uid, "st_gid": st.gid,
                "st_size": st.size, "st_blocks": st.blocks,
                "st_atime": st.atime + st.atime_nsec / 1e9,
                "st_mtime": st.mtime + st.mtime_nsec / 1e9,
                "st_ctime": st.ctime + st.ctime_nsec / 1e9}

    def statfs(self, path):
        sv = StatVfs64()
        ok(lib.nfs_statvfs64(self.nfs, path.encode(), ctypes.byref(sv)))
        return {k: getattr(sv, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree",
                                            "f_bavail", "f_files", "f_ffree", "f_favail",
                                            "f_flag", "f_namemax")}

    def readdir(self, path, fh):
        d = P()
        ok(lib.nfs_opendir(self.nfs, path.encode(), ctypes.byref(d)))
        names = []
        try:
            while True:
                ent = lib.nfs_readdir(self.nfs, d)
                if not ent:
                    break
                names.append(ent.contents.name.decode(errors="surrogateescape"))
        finally:
            lib.nfs_closedir(self.nfs, d)
        return names

    def open(self, path, flags):
        fh = P()
        # O_DIRECT and friends are the kernel's business: NFS sees read/write/append
        ok(lib.nfs_open(self.nfs, path.encode(), flags & (os.O_ACCMODE | os.O_APPEND
                                                          | os.O_TRUNC),
                        ctypes.byref(fh)))
        return self._keep(fh)

    def create(self, path, mode, fi=None):
        fh = P()
        ok(lib.nfs_create(self.nfs, path.encode(), os.O_RDWR | os.O_CREAT | os.O_TRUNC,
                          stat.S_IMODE(mode), ctypes.byref(fh)))
        return self._keep(fh)

    def read(self, path, size, offset, fh):
        buf = ctypes.create_string_buffer(size)
        got = ok(lib.nfs_pread(self.nfs, self.fhs[fh], offset, size, buf))
        return buf.raw[:got]

    def write(self, path, data, offset, fh):
        return ok(lib.nfs_pwrite(self.nfs, self.fhs[fh], offset, len(data), data))

    def truncate(self, path, length, fh=None):
        if fh is not None and fh in self.fhs:
            ok(lib.nfs_ftruncate(self.nfs, self.fhs[fh], length))
        else:
            ok(lib.nfs_truncate(self.nfs, path.encode(), length))

    def fsync(self, path, datasync, fh):
        ok(lib.nfs_fsync(self.nfs, self.fhs[fh]))

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        handle = self.fhs.pop(fh, None)
        if handle is not None:
            ok(lib.nfs_close(self.nfs, handle))

    def mkdir(self, path, mode):
        ok(lib.nfs_mkdir2(self.nfs, path.encode(), stat.S_IMODE(mode)))

    def rmdir(self, path):
        ok(lib.nfs_rmdir(self.nfs, path.encode()))

    def unlink(self, path):
        ok(lib.nfs_unlink(self.nfs, path.encode()))

    def rename(self, old, new):
        ok(lib.nfs_rename(self.nfs, old.encode(), new.encode()))

    def chmod(self, path, mode):
        ok(lib.nfs_chmod(self.nfs, path.encode(), stat.S_IMODE(mode)))

    def chown(self, path, uid, gid):
        return 0  # root on a no_root_squash export: files are root's already

    def utimens(self, path, times=None):
        return 0

    def fallocate(self, path, mode, offset, length, fh):
        raise FuseOSError(errno.EOPNOTSUPP)  # NFSv4.0 has no ALLOCATE: fio writes instead


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: nfsfuse.py nfs://SERVER/EXPORT MOUNTPOINT")
    nfs = lib.nfs_init_context()
    url = lib.nfs_parse_url_dir(nfs, argv[1].encode())
    if not url:
        sys.exit(f"nfsfuse: bad URL {argv[1]}: {lib.nfs_get_error(nfs).decode()}")
    rc = lib.nfs_mount(nfs, url.contents.server, url.contents.path)
    if rc < 0:
        sys.exit(f"nfsfuse: cannot mount {argv[1]}: {lib.nfs_get_error(nfs).decode()}")
    FUSE(NfsFs(nfs), argv[2], foreground=True, nothreads=True, direct_io=True,
         allow_other=True, fsname=argv[1].split("?")[0], subtype="nfs")


if __name__ == "__main__":
    main(sys.argv)
