// SPDX-License-Identifier: Apache-2.0

//go:build !(linux || darwin)

package loader

import (
	"errors"
	"fmt"
	"os"
)

func reserveStdout() (*os.File, error) {
	return nil, errors.New("isolated probes need linux or darwin")
}

func fileIdentity(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano()), nil
}

func openIdentity(f *os.File) (string, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano()), nil
}

func childExecutable() (string, error) { return os.Executable() }
