import Testing
import APNSWire
import CampaignIO

@Suite struct DeviceTokenTests {
    static let hex = "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad"

    @Test(arguments: [
        hex,
        hex.uppercased(),
        "<740f4707 bebcf74f 9b7c25d4 8e335894 5f6aa01d a5ddb387 462c7eaf 61bb78ad>",
        "  740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad\t",
    ])
    func acceptsTheUsualSpellings(text: String) throws {
        let token = try #require(DeviceToken(hex: text))
        #expect(token.bytes.count == 32)
        #expect(token.hex == Self.hex)
    }

    @Test(arguments: ["", "<>", "abc", "zz", "7 40f", "<740f", "740f>", "0x740f"])
    func refusesMalformedText(text: String) {
        #expect(DeviceToken(hex: text) == nil)
    }

    @Test func descriptionDoesNotPrintTheWholeToken() throws {
        let token = try #require(DeviceToken(hex: Self.hex))
        #expect(!String(describing: token).contains(Self.hex))
        #expect(String(describing: token).contains("740f4707"))
    }
}

@Suite struct PayloadInspectorTests {
    @Test(arguments: [
        #"{"aps":{}}"#,
        #"{"aps":{"alert":"Hi","badge":3,"sound":"default"}}"#,
        #" { "x" : [1, -2.5e+3, true, false, null, "\u00e9\n"] , "aps" : { "alert" : { "body" : "¡Hola! 👋" } } } "#,
        #"{"a":{"b":{"c":[[[]]]}},"aps":{"content-available":1}}"#,
    ])
    func acceptsGatewayValidPayloads(json: String) {
        #expect(PayloadInspector.problem(in: Array(json.utf8)) == nil)
    }

    @Test(arguments: [
        (#"{"aps":{}"#, PayloadInspector.Problem.invalidJSON(offset: 9)),
        (#"[1]"#, .notAnObject),
        (#"{"alert":"x"}"#, .missingAps),
        (#"{"aps":"x"}"#, .apsNotADictionary),
        (#"{"aps":{},}"#, .invalidJSON(offset: 10)),
        (#"{"aps":{"a":01}}"#, .invalidJSON(offset: 13)),
        ("{\"aps\":{\"a\":\"\u{01}\"}}", .invalidJSON(offset: 13)),
        (#"{"aps":{"a":"\x"}}"#, .invalidJSON(offset: 14)),
        (#"{"aps":{}} x"#, .invalidJSON(offset: 11)),
    ])
    func findsTheProblem(json: String, problem: PayloadInspector.Problem) {
        #expect(PayloadInspector.problem(in: Array(json.utf8)) == problem)
    }

    @Test func refusesInvalidUTF8() {
        let bytes = Array(#"{"aps":{"alert":""#.utf8) + [0xC0, 0x80] + Array(#""}}"#.utf8)
        #expect(PayloadInspector.problem(in: bytes) == .invalidUTF8)
        let surrogate = Array(#"{"aps":{"alert":""#.utf8) + [0xED, 0xA0, 0x80] + Array(#""}}"#.utf8)
        #expect(PayloadInspector.problem(in: surrogate) == .invalidUTF8)
        let truncated = Array(#"{"aps":{"alert":""#.utf8) + [0xE2, 0x82]
        #expect(PayloadInspector.problem(in: truncated) == .invalidUTF8)
    }

    @Test func refusesDeepNestingWithoutRecursingWithoutBound() {
        let deep = #"{"aps":{},"x":"# + String(repeating: "[", count: 1000) + String(repeating: "]", count: 1000) + "}"
        #expect(PayloadInspector.problem(in: Array(deep.utf8)) == .nestedTooDeeply)
    }
}


@Suite struct FastPathTests {
    /// Strings of mostly ASCII with multi-byte and broken sequences placed at
    /// every offset around the 8-byte steps of the ASCII fast path.
    @Test func utf8ValidationAgreesWithTheStandardLibrary() {
        var rng = SplitMix64(seed: 7)
        let pieces: [[UInt8]] = [
            [0xC3, 0xA9], [0xE2, 0x82, 0xAC], [0xF0, 0x9F, 0x91, 0x8B],   // valid
            [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80],   // overlong, surrogate, too big
            [0xE2, 0x82], [0x80], [0xFF],                                   // cut short, stray, never valid
        ]
        var checked = 0, invalid = 0
        for length in 0..<40 {
            for _ in 0..<60 {
                var bytes = (0..<length).map { _ in UInt8.random(in: 0x20...0x7E, using: &rng) }
                if Bool.random(using: &rng) {
                    let at = Int.random(in: 0...bytes.count, using: &rng)
                    bytes.insert(contentsOf: pieces.randomElement(using: &rng)!, at: at)
                }
                let expected = String(validating: bytes, as: UTF8.self) != nil
                #expect(bytes.withUnsafeBufferPointer { PayloadInspector.isValidUTF8($0) } == expected, "\(bytes)")
                checked += 1
                if !expected { invalid += 1 }
            }
        }
        #expect(checked == 2_400)
        #expect(invalid > 300)
    }

    @Test func tableHexDecodingAgreesWithTheTokenParser() {
        var rng = SplitMix64(seed: 11)
        let alphabet = Array("0123456789abcdefABCDEFgx <>".utf8)
        for _ in 0..<3_000 {
            let text = (0..<Int.random(in: 0...12, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! }
            var out = [UInt8](repeating: 0, count: text.count / 2)
            let ok = text.withUnsafeBufferPointer { t in out.withUnsafeMutableBufferPointer { HexEncoding.decodePairs(t, into: $0.baseAddress ?? UnsafeMutablePointer(bitPattern: 1)!) } }
            let plain = text.allSatisfy { DeviceToken.nibbleValue($0) != nil } && text.count % 2 == 0
            #expect(ok == plain, "\(String(decoding: text, as: UTF8.self))")
            if ok, !text.isEmpty {
                #expect(out == DeviceToken(hex: String(decoding: text, as: UTF8.self))?.bytes)
                var hex: [UInt8] = [0x2A]
                out.withUnsafeBufferPointer { HexEncoding.append($0, to: &hex) }
                #expect(hex == [0x2A] + Array(String(decoding: text, as: UTF8.self).lowercased().utf8))
            }
        }
    }
}
