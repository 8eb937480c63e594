import Foundation
import Persistence
import Testing

@Test func optionalRoundTripsThroughNull() {
    let none: String? = nil
    #expect(none.storeValue == .null)
    #expect(String?(storeValue: .null) == .some(nil))
    #expect(String?(storeValue: .text("a")) == .some("a"))
    #expect(String?(storeValue: .integer(1)) == nil)
}

@Test func datesAreSecondsSince1970() {
    let date = Date(timeIntervalSince1970: 1_700_000_000.5)
    #expect(date.storeValue == .real(1_700_000_000.5))
    #expect(Date(storeValue: .real(1_700_000_000.5)) == date)
}
