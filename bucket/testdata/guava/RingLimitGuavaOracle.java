// The Guava oracle of bucket's differential test (guava_test.go, make guava):
// it drives Guava's own RateLimiter (SmoothBursty and SmoothWarmingUp) on a
// manual clock and prints what Guava decides. It is compiled into Guava's
// package so that it can reach the package-private clock seam
// (RateLimiter.SleepingStopwatch), the factories that take one, and
// SmoothBursty's maxBurstSeconds constructor; it runs with Guava's jar on the
// class path.
//
// Input, one command a line (times in microseconds on the manual clock, rates
// in permits per second as Java doubles):
//
//   bursty PPS MAX_BURST_SECONDS   new SmoothBursty at time 0; 0 means create(PPS)
//   warming PPS WARMUP_NS COLD     new SmoothWarmingUp at time 0: create(PPS,
//                                  WARMUP_NS, NANOSECONDS, COLD); 0 means 3.0
//   acquire NOW N                  acquire(N) at NOW; prints "1 WAIT"
//   drain NOW N                    acquire(N) at NOW; prints "1 -1" (the bucket's
//                                  Drain, whose wait nobody sees)
//   try NOW N                      tryAcquire(N) at NOW; prints "1 WAIT" or "0"
//   tryd NOW N TIMEOUT_NS          tryAcquire(N, Duration.ofNanos(TIMEOUT_NS))
//   rate NOW PPS                   setRate(PPS) at NOW; prints nothing
//   end                            prints "end"
//
// WAIT is the microseconds the limiter asked the caller to sleep.
package com.google.common.util.concurrent;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

final class RingLimitGuavaOracle {
  private RingLimitGuavaOracle() {}

  /** A clock that reads what it is set to and records the sleeps asked of it. */
  private static final class ManualClock extends RateLimiter.SleepingStopwatch {
    long now;
    long slept = -1;

    @Override
    protected long readMicros() {
      return now;
    }

    @Override
    protected void sleepMicrosUninterruptibly(long micros) {
      slept = micros;
    }

    /** Sets the time of the next call and forgets the last sleep. */
    void at(String micros) {
      now = Long.parseLong(micros);
      slept = -1;
    }
  }

  public static void main(String[] args) throws IOException {
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8), 1 << 16);
    PrintWriter out =
        new PrintWriter(
            new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16));
    ManualClock clock = new ManualClock();
    RateLimiter limiter = null;
    String line;
    int lineNo = 0;
    while ((line = in.readLine()) != null) {
      lineNo++;
      String[] f = line.split(" ");
      switch (f[0]) {
        case "bursty":
          {
            clock = new ManualClock();
            clock.now = 0;
            double pps = Double.parseDouble(f[1]);
            double maxBurstSeconds = Double.parseDouble(f[2]);
            if (maxBurstSeconds == 0) {
              limiter = RateLimiter.create(pps, clock);
            } else {
              limiter = new SmoothRateLimiter.SmoothBursty(clock, maxBurstSeconds);
              limiter.setRate(pps);
            }
            break;
          }
        case "warming":
          {
            clock = new ManualClock();
            clock.now = 0;
            double cold = Double.parseDouble(f[3]);
            limiter =
                RateLimiter.create(
                    Double.parseDouble(f[1]),
                    Long.parseLong(f[2]),
                    TimeUnit.NANOSECONDS,
                    cold == 0 ? 3.0 : cold,
                    clock);
            break;
          }
        case "acquire":
          clock.at(f[1]);
          limiter.acquire(Integer.parseInt(f[2]));
          out.println("1 " + clock.slept);
          break;
        case "drain":
          clock.at(f[1]);
          limiter.acquire(Integer.parseInt(f[2]));
          out.println("1 -1");
          break;
        case "try":
          clock.at(f[1]);
          out.println(limiter.tryAcquire(Integer.parseInt(f[2])) ? "1 " + clock.slept : "0");
          break;
        case "tryd":
          clock.at(f[1]);
          boolean ok =
              limiter.tryAcquire(Integer.parseInt(f[2]), Duration.ofNanos(Long.parseLong(f[3])));
          out.println(ok ? "1 " + clock.slept : "0");
          break;
        case "rate":
          clock.at(f[1]);
          limiter.setRate(Double.parseDouble(f[2]));
          break;
        case "end":
          out.println("end");
          break;
        default:
          throw new IllegalArgumentException("line " + lineNo + ": unknown command: " + line);
      }
    }
    out.flush();
  }
}
