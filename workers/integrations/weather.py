"""``weather``: current conditions and daily forecasts from Open-Meteo (``TOOLRELAY_WEATHER_BASE_URL``)."""

from __future__ import annotations

from typing import Any

from workers.integrations.base import Call, Method, Provider, Values, schema

CURRENT = ("temperature_2m", "relative_humidity_2m", "apparent_temperature", "precipitation", "weather_code",
           "wind_speed_10m")
DAILY = ("temperature_2m_max", "temperature_2m_min", "precipitation_sum", "weather_code")

PLACE = {
    "latitude": {"type": "number", "minimum": -90, "maximum": 90},
    "longitude": {"type": "number", "minimum": -180, "maximum": 180},
    "temperature_unit": {"enum": ["celsius", "fahrenheit"], "default": "celsius"},
}


def _params(values: Values, **extra: Any) -> dict[str, Any]:
    return {"latitude": values["latitude"], "longitude": values["longitude"],
            "temperature_unit": values.get("temperature_unit", "celsius"), "timezone": "auto",
            "apikey": values.get("api_key"), **extra}


async def current(values: Values, call: Call) -> dict[str, Any]:
    data = await call.get_json(call.trusted.get(), call.settings.weather_base_url,
                               _params(values, current=",".join(CURRENT)), "Open-Meteo")
    now = data.get("current") or {}
    return {"latitude": data.get("latitude"), "longitude": data.get("longitude"), "timezone": data.get("timezone"),
            "time": now.get("time"), "current": {name: now.get(name) for name in CURRENT},
            "units": {name: (data.get("current_units") or {}).get(name) for name in CURRENT}}


async def forecast(values: Values, call: Call) -> dict[str, Any]:
    days = values.get("days", 7)
    data = await call.get_json(call.trusted.get(), call.settings.weather_base_url,
                               _params(values, daily=",".join(DAILY), forecast_days=days), "Open-Meteo")
    daily = data.get("daily") or {}
    dates = daily.get("time") or []
    return {"latitude": data.get("latitude"), "longitude": data.get("longitude"), "timezone": data.get("timezone"),
            "days": [{"date": date, **{name: (daily.get(name) or [None] * len(dates))[i] for name in DAILY}}
                     for i, date in enumerate(dates)],
            "units": {name: (data.get("daily_units") or {}).get(name) for name in DAILY}}


SETUP = schema({"api_key": {"type": "string", "writeOnly": True,
                            "description": "Open-Meteo commercial API key (not needed for the free API)."}})
OUTPUT = {"type": "object", "required": ["latitude", "longitude"]}

PROVIDER = Provider(
    name="weather",
    description="Current weather and daily forecasts for a place (Open-Meteo).",
    setup=SETUP,
    methods=(
        Method(name="current", description="Current weather (temperature, humidity, wind, precipitation) at a place.",
               arguments=schema(PLACE, ["latitude", "longitude"]),
               output={**OUTPUT, "properties": {"current": {"type": "object"}, "units": {"type": "object"}}},
               run=current),
        Method(name="forecast", description="Daily forecast (min/max temperature, precipitation) for up to 16 days.",
               arguments=schema({**PLACE, "days": {"type": "integer", "minimum": 1, "maximum": 16, "default": 7}},
                                ["latitude", "longitude"]),
               output={**OUTPUT, "properties": {"days": {"type": "array", "items": {"type": "object"}}}},
               run=forecast),
    ),
)
