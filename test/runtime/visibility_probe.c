/*===- test/runtime/visibility_probe.c - a shared libhtprt to inspect ------===*
 *
 * Empty on purpose: the probe library is libhtprt.a linked whole into a
 * shared object, so check_visibility.py can read which symbols a shared
 * build of the runtime exports (only the HTP_API functions should be).
 *===----------------------------------------------------------------------===*/
typedef int htp_visibility_probe_unused;
