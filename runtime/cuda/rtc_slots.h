/* rtc_slots.h — how many ZeRO-3 gathers may be in flight ahead of their
 * first reader (rtc_allgather_ahead's slots).  The compiler numbers the
 * slots of the programs it writes up to ir/rankprog.h's PROG_AHEAD_SLOTS;
 * tests/unit/test_program.c asserts the two are equal. */
#ifndef RTC_SLOTS_H
#define RTC_SLOTS_H
#define RTC_AHEAD_SLOTS 2
#endif
