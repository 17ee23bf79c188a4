package api

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerClosed reports whether conn's peer has closed it or shut down its
// sending side (a FIN or a reset arrived), even with bytes it sent still
// unread, without reading or waiting. net/http, too, takes a client that
// stops sending for one that has gone.
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true // closed on this side
	}
	closed := false
	_ = raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			closed = fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return closed
}
