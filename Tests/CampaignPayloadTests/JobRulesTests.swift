import Testing
import APNSWire
import CampaignJSON
@testable import CampaignPayload

/// Per-language fallback chains, and Apple's rules for push types: the
/// topic each type goes to and what a Live Activity's payload must hold.
@Suite struct JobRulesTests {
    static let messages = #""messages":{"en":{"alert":"en"},"es":{"alert":"es"},"de":{"alert":"de"}}"#

    @Test func eachLanguageMayHaveItsOwnFallbackChain() throws {
        let j = try job(#"{"campaign":"c",\#(Self.messages),"fallback":{"pt":["es"],"ca":["es"],"pt-PT":["de"],"*":["en"]}}"#)
        let s = j.selector
        func chosen(_ tag: String?) -> String? { s.select(tag.flatMap { LanguageTag($0) }).map { j.messages[$0].tag } }
        #expect(chosen("pt-BR") == "es" && chosen("ca-ES") == "es" && chosen("pt") == "es")
        #expect(chosen("pt-PT") == "de", "the most specific chain wins")
        #expect(chosen("fr") == "en" && chosen(nil) == "en", "\"*\": every other language, and rows without one")
        #expect(chosen("de-AT") == "de" && chosen("es-MX") == "es", "a language with a message never falls back")
        #expect(j.fallback == ["en"] && j.fallbackByLanguage["pt"] == ["es"])
    }

    @Test func withoutAStarOtherLanguagesHaveNoFallback() throws {
        let j = try job(#"{"campaign":"c",\#(Self.messages),"fallback":{"pt":["es"]}}"#)
        #expect(j.selector.select(LanguageTag("fr")) == nil)
        #expect(j.selector.select(LanguageTag("pt-BR")).map { j.messages[$0].tag } == "es")
    }

    @Test(arguments: [
        (#"{"pt":"es"}"#, "fallback.pt must be an array of language tags, not a string"),
        (#"{"pt":["it"]}"#, "fallback.pt: \"it\" has no message in \"messages\""),
        (#"{" ":["en"]}"#, "fallback: \" \" is not a language tag (or \"*\" for every other)"),
        (#""en""#, "\"fallback\" must be an array of language tags, or an object from language to such an array, not a string"),
    ])
    func badFallbacksAreNamed(fallback: String, reason: String) {
        #expect(jobError(#"{"campaign":"c",\#(Self.messages),"fallback":\#(fallback)}"#) == reason)
    }

    static func h2(_ pushType: String, topic: String, aps: String = #"{"alert":"x"}"#) throws -> CampaignJob {
        try job(#"{"campaign":"c","format":"h2","topic":"\#(topic)","pushType":"\#(pushType)","priority":5,"messages":{"en":\#(aps)}}"#)
    }

    static let liveActivity = #"{"timestamp":"{now:int}","event":"update","content-state":{"score":"{score:int|0}"}}"#

    @Test func aBareBundleIdGetsTheSuffixItsPushTypeRequires() throws {
        #expect(try Self.h2("voip", topic: "com.example.app").topic == "com.example.app.voip")
        #expect(try Self.h2("liveactivity", topic: "com.example.app", aps: Self.liveActivity).topic == "com.example.app.push-type.liveactivity")
        // Not through h2(_:topic:), whose priority 5 pushtotalk refuses.
        #expect(try job(#"{"campaign":"c","format":"h2","topic":"com.example.app","pushType":"pushtotalk","messages":{"en":{"alert":"x"}}}"#).topic
            == "com.example.app.voip-ptt")
        #expect(try Self.h2("fileprovider", topic: "com.example.app").topic == "com.example.app.pushkit.fileprovider")
        #expect(try Self.h2("location", topic: "com.example.app").topic == "com.example.app.location-query")
        #expect(try Self.h2("complication", topic: "com.example.app").topic == "com.example.app.complication")
        #expect(try Self.h2("alert", topic: "com.example.app").topic == "com.example.app")
        #expect(try Self.h2("voip", topic: "com.example.app.voip").topic == "com.example.app.voip", "already suffixed: as given")
    }

    @Test func aTopicWithAnotherTypesSuffixIsRefused() {
        #expect(throws: JobError.self) { try Self.h2("alert", topic: "com.example.app.voip") }
        #expect { try Self.h2("liveactivity", topic: "com.example.app.voip", aps: Self.liveActivity) } throws: {
            ($0 as? JobError)?.reason.sentence.contains("a liveactivity push goes to com.example.app.push-type.liveactivity") == true
        }
    }

    @Test(arguments: [
        (#"{"event":"update","content-state":{}}"#, "needs \"timestamp\""),
        (#"{"timestamp":"now","event":"update","content-state":{}}"#, "timestamp must be a number"),
        (#"{"timestamp":1,"event":"pause","content-state":{}}"#, "needs \"event\""),
        (#"{"timestamp":1,"event":"end"}"#, "needs \"content-state\""),
        (#"{"timestamp":1,"event":"start","content-state":{}}"#, "needs \"attributes-type\""),
        (#"{"timestamp":1,"event":"start","content-state":{},"attributes-type":"A"}"#, "needs \"attributes\""),
    ])
    func aLiveActivityPayloadHoldsWhatAPNsRequires(aps: String, refusal: String) {
        #expect { try Self.h2("liveactivity", topic: "com.example.app", aps: aps) } throws: {
            ($0 as? JobError)?.reason.sentence.contains(refusal) == true
        }
    }

    @Test func aCompleteLiveActivityIsAccepted() throws {
        _ = try Self.h2("liveactivity", topic: "com.example.app", aps: Self.liveActivity)
        _ = try Self.h2("liveactivity", topic: "com.example.app",
                        aps: #"{"timestamp":1700000000,"event":"start","content-state":{},"attributes-type":"Match","attributes":{"home":"A"}}"#)
    }

    @Test func columnsMapOnlyNamesTheJobUses() {
        #expect(jobError(#"{"campaign":"c","messages":{"en":{"alert":"Hi {first_name}"}},"columns":{"token":"device_id","first_name":"fname","lang":"locale"}}"#) == nil)
        #expect(jobRefusal(#"{"campaign":"c","messages":{"en":{"alert":"Hi {first_name}"}},"columns":{"frist_name":"fname"}}"#)
                == .unmappedName("frist_name", mappable: ["token", "lang", "registered_at", "tz", "first_name"]))
        #expect(jobError(#"{"campaign":"c","messages":{"en":{"alert":"Hi {first_name}"}},"columns":{"frist_name":"fname"}}"#)
                == "\"frist_name\" is not a name the job uses (it maps: token, lang, registered_at, tz, first_name)")
        #expect(jobRefusal(#"{"campaign":"c","mesages":{}}"#) == .unknownKey("mesages", known: CampaignJob.knownKeys.sorted()))
        #expect(jobRefusal("[1]") == .notAnObject)
        #expect(jobError(#"{"campaign":"c","messages":{"en":{"alert":"x"}},"columns":{"token":""}}"#) == "columns.token must name a column of the export (a string)")
    }
}
