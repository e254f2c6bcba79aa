/* rtc_slots.h — how many ZeRO-3 gathers may be in flight ahead of their
 * first reader (rtc_allgather_ahead's slots), and how many ZeRO-2/3
 * reduce-scatters trail at once (rtc_reduce_scatter_trail).  The compiler
 * writes its programs for ir/rankprog.h's PROG_AHEAD_SLOTS and PROG_TRAILS
 * (the memory plan keeps that many trailing buffers live);
 * tests/unit/test_program.c asserts the numbers are equal. */
#ifndef RTC_SLOTS_H
#define RTC_SLOTS_H
#define RTC_AHEAD_SLOTS 2
#define RTC_TRAILS 2
#endif
