//go:build tools

// Package tools pins the OpenKruise command this module builds.
package tools

import _ "github.com/openkruise/kruise"
