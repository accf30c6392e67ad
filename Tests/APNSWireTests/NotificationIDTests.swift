import Testing
@testable import APNSWire

@Suite struct NotificationIDTests {
    @Test func theSameRecordOfTheSamePlanHasTheSameID() {
        let a = NotificationID.uuid(planChecksum: "0a1b2c3d", seq: 42)
        #expect(a == NotificationID.uuid(planChecksum: "0a1b2c3d", seq: 42))
        #expect(a != NotificationID.uuid(planChecksum: "0a1b2c3d", seq: 43))
        #expect(a != NotificationID.uuid(planChecksum: "0a1b2c3e", seq: 42))
    }

    @Test func itIsACanonicalVersion8UUIDCarryingTheSeq() {
        let id = NotificationID.uuid(planChecksum: "deadbeef", seq: 0x0123_4567_89AB)
        let groups = id.split(separator: "-").map(String.init)
        #expect(groups.map(\.count) == [8, 4, 4, 4, 12])
        #expect(id == id.lowercased() && id.allSatisfy { $0 == "-" || $0.isHexDigit })
        #expect(groups[2].first == "8", "version 8")
        #expect(["8", "9", "a", "b"].contains(groups[3].first!), "variant 10")
        #expect(groups[3] + groups[4] == "8000" + "0123456789ab", "the seq, in the last 8 bytes")
    }
}

@Suite struct NotificationIDWriterTests {
    @Test(arguments: [UInt64(0), 1, 42, UInt64(1) << 40, (UInt64(1) << 62) - 1] as [UInt64])
    func theWriterMatchesTheStringForm(seq: UInt64) {
        let checksum = "9e80730b"
        var out = [UInt8](repeating: 0, count: 36)
        out.withUnsafeMutableBufferPointer { NotificationID.write(hash: NotificationID.hash(planChecksum: checksum), seq: seq, to: $0.baseAddress!) }
        #expect(String(decoding: out, as: UTF8.self) == NotificationID.uuid(planChecksum: checksum, seq: seq))
    }
}
