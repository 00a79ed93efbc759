// SPDX-License-Identifier: Apache-2.0
// libdspipe.so, the installed library (CMakeLists.txt, "dspipe::dspipe"), is the component
// archives linked whole; a shared library target needs one source of its own, and this is it.
