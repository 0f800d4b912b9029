"""The engine: launching, reconciling, recovering and idling, written against the EngineStore port."""
