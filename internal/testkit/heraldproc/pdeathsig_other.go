//go:build !linux

package heraldproc

import "syscall"

// dieWithParent does nothing where the kernel cannot stop a child with
// its parent.
func dieWithParent() *syscall.SysProcAttr { return nil }
