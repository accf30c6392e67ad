import Testing
import APNSWire

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

