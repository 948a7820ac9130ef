"""Crawl shops: each page yields an item and follows its links (de-duplicated by scrapeq)."""

from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy.http import Response


class ShopSpider(scrapy.Spider):
    """``scrapy crawl shop -a start=URL[,URL...]``: start pages, then every link found."""

    name = "shop"

    def __init__(self, start: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_pages = [u for u in start.split(",") if u]

    async def start(self) -> Any:
        for url in self.start_pages:
            yield scrapy.Request(url, callback=self.parse_page)

    def parse_page(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url, "title": response.css("title::text").get()}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse_page)
