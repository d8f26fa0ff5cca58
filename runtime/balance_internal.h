/*===- runtime/balance_internal.h - the balancer's private entry points ---===*
 *
 * Private to libhtprt and its tests. htp_balancer_end_iteration is "step,
 * then apply"; tests (and a future cost-model driver) force a plan with
 * htp_planner_plan_speeds on htp_balancer_planner() and then apply it here,
 * bypassing detection.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_BALANCE_INTERNAL_H
#define HTP_BALANCE_INTERNAL_H

#include "runtime/htp.h"

/* Makes plan the one the hooks follow: the unit table and the migration
 * transfers for it (collective over the plan's flows, as
 * htp_migration_apply). A version already applied costs nothing. */
htp_result htp__balancer_apply(htp_balancer *balancer, const htp_plan *plan);
/* The balancer's unit table and migration cache (owned by the balancer). */
htp_unit_table *htp__balancer_table(htp_balancer *balancer);
htp_migration *htp__balancer_migration(htp_balancer *balancer);

#endif /* HTP_BALANCE_INTERNAL_H */
