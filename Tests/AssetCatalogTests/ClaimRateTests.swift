import Foundation
import Testing

@testable import AssetCatalog

/// How far ahead of its runs a worker claims (``ClaimRate``): about 100 ms of work at the rate
/// results recently committed, read sooner when short jobs show it sooner.
@Suite struct ClaimRateTests {
    let start = ContinuousClock.now

    /// Short jobs: two slots, and four results within 16 ms. Read only after 100 ms, the
    /// worker went on claiming two jobs at a time (a transaction each) for those 100 ms.
    @Test func shortJobsAreReadBeforeTheWindowEnds() {
        var rate = ClaimRate(windowStart: start)
        let soon = start.advanced(by: .nanoseconds(15_625_000))  // 1/64 s
        #expect(!rate.isDue(at: soon, finished: 3, claimWorth: 2))
        #expect(rate.isDue(at: soon, finished: 4, claimWorth: 2))
        rate.read(at: soon, finished: 4, limit: 1024)
        #expect(rate.claimAhead == 26)  // 256 results a second: 25.6 in 100 ms
        // The next reading comes once twice the new claim's worth has ended, or at 100 ms.
        let later = soon.advanced(by: .nanoseconds(31_250_000))  // 1/32 s
        #expect(!rate.isDue(at: later, finished: 55, claimWorth: 28))
        #expect(rate.isDue(at: later, finished: 56, claimWorth: 28))
        rate.read(at: later, finished: 56, limit: 1024)
        #expect(rate.claimAhead == 180)  // 1,792 a second
        #expect(rate.isDue(at: later.advanced(by: .milliseconds(100)), finished: 0, claimWorth: 182))
    }

    /// Long jobs that end together (every slot's, and those claimed ahead) are no reason to
    /// read early: at most a claim's worth can end at once.
    @Test func longJobsEndingTogetherWaitForTheWindow() {
        let rate = ClaimRate(windowStart: start)
        #expect(!rate.isDue(at: start.advanced(by: .milliseconds(1)), finished: 16, claimWorth: 16))
        #expect(!rate.isDue(at: start.advanced(by: .milliseconds(99)), finished: 31, claimWorth: 16))
        #expect(rate.isDue(at: start.advanced(by: .milliseconds(100)), finished: 16, claimWorth: 16))
    }

    /// The reading is capped, and a window with nothing finished claims nothing ahead.
    @Test func theReadingIsCappedAndFallsToNothing() {
        var rate = ClaimRate(windowStart: start)
        rate.read(at: start.advanced(by: .milliseconds(1)), finished: 5_000, limit: 1024)
        #expect(rate.claimAhead == 1024)
        rate.read(at: start.advanced(by: .milliseconds(200)), finished: 0, limit: 1024)
        #expect(rate.claimAhead == 0)
    }
}
