package heraldproc

import "syscall"

// dieWithParent has the kernel SIGKILL the server when its parent dies.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
